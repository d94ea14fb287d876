package api

import (
	"encoding/json"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// clientID is the deprecated constant E2B returns in every sandbox body.
const clientID = "6532622b"

// sandboxView is the Sandbox body of create and connect.
type sandboxView struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

func (h *Handler) sandboxView(sb store.Sandbox) sandboxView {
	return sandboxView{
		SandboxID:          sb.ID,
		TemplateID:         sb.TemplateID,
		Alias:              sb.Alias,
		ClientID:           clientID,
		EnvdVersion:        h.envdVersion,
		EnvdAccessToken:    sb.EnvdAccessToken,
		TrafficAccessToken: nullable(sb.TrafficAccessToken),
		Domain:             nullable(h.domain),
	}
}

// listedView is one ListedSandbox item.
type listedView struct {
	SandboxID    string              `json:"sandboxID"`
	TemplateID   string              `json:"templateID"`
	Alias        string              `json:"alias,omitempty"`
	ClientID     string              `json:"clientID"`
	StartedAt    time.Time           `json:"startedAt"`
	EndAt        time.Time           `json:"endAt"`
	CPUCount     int                 `json:"cpuCount"`
	MemoryMB     int                 `json:"memoryMB"`
	DiskSizeMB   int                 `json:"diskSizeMB"`
	Metadata     map[string]string   `json:"metadata,omitempty"`
	State        store.State         `json:"state"`
	EnvdVersion  string              `json:"envdVersion"`
	VolumeMounts []store.VolumeMount `json:"volumeMounts,omitempty"`
}

func (h *Handler) listedView(sb store.Sandbox) listedView {
	return listedView{
		SandboxID:    sb.ID,
		TemplateID:   sb.TemplateID,
		Alias:        sb.Alias,
		ClientID:     clientID,
		StartedAt:    sb.StartedAt,
		EndAt:        sb.EndAt,
		CPUCount:     sb.CPUCount,
		MemoryMB:     sb.MemoryMB,
		DiskSizeMB:   sb.DiskSizeMB,
		Metadata:     sb.Metadata,
		State:        sb.State,
		EnvdVersion:  h.envdVersion,
		VolumeMounts: sb.VolumeMounts,
	}
}

// detailView is the SandboxDetail body of GET /sandboxes/{id}: the list
// item plus what only getInfo returns. PausedWith, ResumedBy and Reboots
// are our extensions (docs/LIFECYCLE.md).
type detailView struct {
	listedView
	EnvdAccessToken     string          `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool           `json:"allowInternetAccess"`
	Domain              *string         `json:"domain"`
	Network             json.RawMessage `json:"network,omitempty"`
	Lifecycle           lifecycleView   `json:"lifecycle"`
	PausedWith          string          `json:"pausedWith,omitempty"`
	ResumedBy           string          `json:"resumedBy,omitempty"`
	Reboots             int             `json:"reboots,omitempty"`
}

type lifecycleView struct {
	OnTimeout  string `json:"onTimeout"` // kill or pause
	AutoResume bool   `json:"autoResume"`
}

// pausedWith names how a paused sandbox is kept.
var pausedWith = map[store.PauseKind]string{
	store.PausedInRAM:  "memory-in-ram",
	store.PausedOnDisk: "memory-on-disk",
	store.PausedFiles:  "filesystem",
}

func (h *Handler) detailView(sb store.Sandbox) detailView {
	onTimeout := "kill"
	if sb.AutoPause {
		onTimeout = "pause"
	}
	v := detailView{
		listedView:          h.listedView(sb),
		EnvdAccessToken:     sb.EnvdAccessToken,
		AllowInternetAccess: sb.AllowInternetAccess,
		Domain:              nullable(h.domain),
		Network:             publicNetwork(sb.Network),
		Lifecycle:           lifecycleView{OnTimeout: onTimeout, AutoResume: sb.AutoResume},
		ResumedBy:           sb.ResumedBy,
		Reboots:             sb.Reboots,
	}
	if sb.State == store.StatePaused {
		v.PausedWith = pausedWith[sb.PausedAs]
	}
	return v
}

// publicNetwork returns the stored create-time network config without the
// egress proxy password (spec §2.6); nil if there is none or it is not an
// object.
func publicNetwork(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg == nil {
		return nil
	}
	if proxy, ok := cfg["egressProxy"]; ok {
		var p map[string]json.RawMessage
		if err := json.Unmarshal(proxy, &p); err != nil || p == nil {
			delete(cfg, "egressProxy")
		} else {
			delete(p, "password")
			b, _ := json.Marshal(p) // re-encoding decoded JSON cannot fail
			cfg["egressProxy"] = b
		}
	}
	b, _ := json.Marshal(cfg)
	return b
}

// nullable returns nil for "", so the field encodes as null.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
