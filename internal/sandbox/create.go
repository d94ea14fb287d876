package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// EnvdPort is where envd listens inside every sandbox.
const EnvdPort = isolation.EnvdPort

// Defaults the manager gives envd when the template does not say.
const (
	defaultUser    = "user"
	defaultWorkdir = "/home/user"
)

// Bounds of a create's waits for envd: envdTimeout for it to answer
// after the backend started the sandbox, initTimeout for POST /init.
const (
	envdTimeout = 30 * time.Second
	initTimeout = 30 * time.Second
)

// Create starts a sandbox and returns once envd is initialised in it.
// req.Template names a template or a snapshot (snapshot.go).
func (m *Manager) Create(ctx context.Context, req CreateRequest) (store.Sandbox, error) {
	if err := m.checkTimeout(req.Timeout); err != nil {
		return store.Sandbox{}, err
	}
	// The rest of CheckRequest is parseEgress's, below.
	if err := checkShape(req); err != nil {
		return store.Sandbox{}, err
	}
	sn, unpin, err := m.findSnapshot(ctx, req.Template)
	if err != nil {
		return store.Sandbox{}, err
	}
	if unpin != nil {
		defer unpin()
		return m.createFromSnapshot(ctx, req, sn)
	}
	tmpl, err := m.cfg.Templates.Lookup(req.Template)
	var building *template.BuildingError
	switch {
	case errors.Is(err, template.ErrNotFound):
		return store.Sandbox{}, invalid("template '%s' not found", req.Template)
	case errors.As(err, &building):
		return store.Sandbox{}, &userError{kind: ErrUnavailable, msg: building.Error(), cause: building}
	case err != nil:
		return store.Sandbox{}, fmt.Errorf("looking up template %q: %w", req.Template, err)
	}
	release, err := m.useTemplate(tmpl.Name)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer release()
	backend := m.backendFor(tmpl)
	if err := m.checkPolicy(backend, req); err != nil {
		return store.Sandbox{}, err
	}
	if err := m.checkMounts(ctx, backend, req.VolumeMounts); err != nil {
		return store.Sandbox{}, err
	}
	ec, err := m.parseEgress(req.Network, req.AllowInternetAccess, tmpl)
	if err != nil {
		return store.Sandbox{}, err
	}
	req.Network = ec.network
	res, err := m.resources(tmpl)
	if err != nil {
		return store.Sandbox{}, err
	}
	if err := m.checkDisk(res.DiskSizeMB); err != nil {
		return store.Sandbox{}, err
	}
	now := m.cfg.Now()
	rec := m.newRecord(req, tmpl, res, backend, now)
	// A pool member has no volumes and an ID of its own: a create that
	// mounts any boots, as does one that names an ID no member has.
	if len(req.VolumeMounts) == 0 {
		if w := m.takeWarm(tmpl, ec, req.ID); w != nil {
			return m.handOut(ctx, w, rec, req, tmpl, ec)
		}
	}
	if err := m.admit(); err != nil {
		return store.Sandbox{}, err
	}
	defer m.release()
	rec, err = m.record(ctx, rec)
	if err != nil {
		return store.Sandbox{}, err
	}
	log := m.sandboxLog(rec.ID)
	log.Info("creating sandbox", "template", tmpl.ID)
	inst, err := m.boot(ctx, rec, tmpl, res, nil, log)
	if err != nil {
		return store.Sandbox{}, err
	}
	return m.finish(ctx, rec, inst, rec.EnvdAccessToken, tmpl, req.EnvVars, false, nil, log, now)
}

// CheckRequest refuses what is wrong with req on any server, in the words
// a create answers with (ErrInvalid): a network config that is not JSON,
// or whose egress rules or fields no server takes; the lifecycle
// combinations E2B refuses; an ID that is not routable. What depends on
// the server (its timeout limit, bandwidth cap, templates, backend,
// volumes, egress proxy) is checked by Create. The API replicas of
// cluster mode check a create with it before placing it, so that a
// request no node could take costs no write.
func CheckRequest(req CreateRequest) error {
	if err := checkShape(req); err != nil {
		return err
	}
	if _, err := egress.ParseRules(req.Network, req.AllowInternetAccess); err != nil {
		return invalid("%v", err)
	}
	return checkNetworkFields(req.Network)
}

// checkShape is CheckRequest but for the network config's rules and
// fields, which Create reads once, with its own limits (parseEgress).
func checkShape(req CreateRequest) error {
	if req.Network != nil && !json.Valid(req.Network) {
		return invalid("network config is not valid JSON")
	}
	if err := checkLifecycle(req); err != nil {
		return err
	}
	if req.ID != "" && !RoutableID(req.ID) {
		return invalid("sandbox ID %q: want 1 to %d lower-case letters and digits, which a <port>-<id> host label carries", req.ID, maxIDLength)
	}
	return nil
}

// checkLifecycle refuses the lifecycle combinations E2B refuses, in its
// words.
func checkLifecycle(req CreateRequest) error {
	switch {
	case req.AutoPauseFiles && !req.AutoPause:
		return invalid("autoPauseMemory=false only applies when autoPause is true.")
	case req.AutoPauseFiles && req.AutoResume:
		return invalid("autoPauseMemory=false (filesystem-only auto-pause) cannot be combined with autoResume: " +
			"a filesystem-only snapshot cannot be auto-resumed by traffic and must be resumed explicitly.")
	}
	return nil
}

// checkPolicy refuses a create whose lifecycle policy backend cannot
// carry out (pause.go).
func (m *Manager) checkPolicy(backend isolation.Backend, req CreateRequest) error {
	if !req.AutoPause {
		return nil
	}
	if req.AutoPauseFiles {
		if !m.canSnapshot(backend, isolation.FilesSnapshot) {
			return cannot(backend, "save a sandbox's file system: autoPauseMemory false (a filesystem-only pause) is not available")
		}
		return nil
	}
	if !backend.Capabilities().Pause && !m.canSnapshot(backend, isolation.MemorySnapshot) {
		return cannot(backend, "pause sandboxes: autoPause is not available")
	}
	return nil
}

// newRecord is the record of a sandbox that req creates from tmpl, with
// res, on backend, at now; not yet stored.
func (m *Manager) newRecord(req CreateRequest, tmpl *template.Template, res isolation.Resources, backend isolation.Backend, now time.Time) store.Sandbox {
	rec := store.Sandbox{
		ID:                  req.ID,
		TemplateID:          tmpl.ID,
		Alias:               tmpl.Name,
		State:               store.StateStarting,
		StartedAt:           now,
		EndAt:               now.Add(req.Timeout),
		Timeout:             req.Timeout,
		CPUCount:            res.CPUCount,
		MemoryMB:            res.MemoryMB,
		DiskSizeMB:          res.DiskSizeMB,
		Metadata:            req.Metadata,
		EnvVars:             req.EnvVars,
		AllowInternetAccess: req.AllowInternetAccess,
		AutoPause:           req.AutoPause,
		AutoPauseFiles:      req.AutoPauseFiles,
		AutoResume:          req.AutoResume,
		Network:             req.Network,
		Backend:             backend.Name(),
		EnvdAccessToken:     newToken(), // whatever Secure says: envd always wants one
		Secure:              req.Secure,
		VolumeMounts:        req.VolumeMounts,
	}
	if denyPublicTraffic(req.Network) {
		rec.TrafficAccessToken = newToken()
	}
	return rec
}

// record stores rec, in state starting, under its ID (the request's) or a
// new one, before anything exists: a crash from here on leaves a
// "starting" record that reconcile cleans up.
func (m *Manager) record(ctx context.Context, rec store.Sandbox) (store.Sandbox, error) {
	given := rec.ID != ""
	for attempt := 0; ; attempt++ {
		if !given {
			rec.ID = NewID()
		}
		out, err := m.cfg.Store.CreateSandbox(ctx, rec)
		if err == nil {
			return out, nil
		}
		if given && errors.Is(err, store.ErrExists) {
			return store.Sandbox{}, conflict("a sandbox with ID %s exists already", rec.ID)
		}
		if !errors.Is(err, store.ErrExists) || attempt == 3 {
			return store.Sandbox{}, fmt.Errorf("recording new sandbox: %w", err)
		}
	}
}

// abort undoes a create of rec that failed at step (undo) and records the
// error. It returns the error to give the caller.
func (m *Manager) abort(ctx context.Context, rec store.Sandbox, inst isolation.Instance, log *slog.Logger, step string, err error) error {
	m.undo(context.WithoutCancel(ctx), rec, inst, log)
	return m.failed(ctx, rec, log, step, err)
}

// failed records that the create of rec failed at step, and returns the
// error to give the caller.
func (m *Manager) failed(ctx context.Context, rec store.Sandbox, log *slog.Logger, step string, err error) error {
	err = fmt.Errorf("creating sandbox %s: %s: %w", rec.ID, step, err)
	if serr := m.cfg.Store.SetState(context.WithoutCancel(ctx), rec.ID, store.StateError, err.Error()); serr != nil {
		log.Error("recording a failed create", "err", serr)
	}
	// Nothing of it runs any more (undo).
	m.detachVolumes(ctx, rec.ID, m.backends[rec.Backend], rec.VolumeMounts, log)
	return err
}

// undo takes down what a failed start of rec left: it detaches the
// network and stops inst, or has rec's backend clean up by ID when there
// is none yet.
func (m *Manager) undo(ctx context.Context, rec store.Sandbox, inst isolation.Instance, log *slog.Logger) {
	m.detachNetwork(rec.ID)
	if inst != nil {
		if serr := inst.Stop(ctx); serr != nil {
			log.Error("stopping sandbox after a failed start", "err", serr)
		}
	} else if cerr := m.backends[rec.Backend].Cleanup(ctx, rec.ID, nil); cerr != nil {
		log.Error("cleaning up after a failed start", "err", cerr)
	}
}

// startFrom is a snapshot a sandbox starts from, and the kind it starts
// as (a memory snapshot's files alone start a sandbox that boots afresh).
type startFrom struct {
	snap store.Snapshot
	kind isolation.SnapshotKind
}

// boot is launch for a create: its failure is recorded.
func (m *Manager) boot(ctx context.Context, rec store.Sandbox, tmpl *template.Template, res isolation.Resources, from *startFrom, log *slog.Logger) (isolation.Instance, error) {
	inst, step, err := m.launch(ctx, rec, tmpl, res, from, log)
	if err != nil {
		return nil, m.failed(ctx, rec, log, step, err)
	}
	return inst, nil
}

// launch starts the recorded sandbox rec of tmpl (from a snapshot, when
// from is set) with res on its backend, waits for envd and attaches its
// network; envd runs in it, not yet initialised, and requires rec's
// access token from its first request. On error it returns the step that
// failed, with nothing left running.
func (m *Manager) launch(ctx context.Context, rec store.Sandbox, tmpl *template.Template, res isolation.Resources, from *startFrom, log *slog.Logger) (isolation.Instance, string, error) {
	spec := isolation.Spec{
		ID:       rec.ID,
		RootFS:   tmpl.RootFS,
		EnvdPath: m.cfg.EnvdPath,
		Hostname: rec.ID,
		Tools:    m.cfg.Tools,
		// Required from envd's first request: a pool member's envd,
		// waiting for its /init, answers nobody but this manager.
		EnvdAccessToken: rec.EnvdAccessToken,
		Resources:       res,
	}
	if from != nil {
		spec.Snapshot = &isolation.SnapshotSource{Dir: m.snapshotDir(from.snap.ID), Kind: from.kind, EnvdAccessToken: from.snap.EnvdAccessToken}
	}
	backend := m.backends[rec.Backend]
	fail := func(inst isolation.Instance, step string, err error) (isolation.Instance, string, error) {
		m.undo(context.WithoutCancel(ctx), rec, inst, log)
		return nil, step, err
	}
	var err error
	if spec.Volumes, err = m.volumeSpecs(ctx, rec, backend); err != nil {
		return fail(nil, "finding its volumes", err)
	}
	if err := m.rootImage(ctx, backend, &spec, tmpl); err != nil {
		return fail(nil, "making the template's image", err)
	}
	inst, err := backend.Start(ctx, spec)
	if err != nil {
		return fail(nil, "starting", err)
	}
	if err := m.cfg.Store.SetBackendState(ctx, rec.ID, inst.State()); err != nil {
		return fail(inst, "recording backend state", err)
	}
	if err := waitEnvd(ctx, inst); err != nil {
		return fail(inst, "waiting for envd", err)
	}
	// Before envd runs anything: a start command may resolve names at once.
	if err := m.attachNetwork(ctx, rec, inst, tmpl); err != nil {
		return fail(inst, "attaching the network gateway", err)
	}
	return inst, "", nil
}

// finish initialises envd in a booted sandbox (initialise), records the
// sandbox running and makes it live. token is the access token envd has
// now (it differs from rec's for a pool member, whose token is rotated
// here); restored says that the sandbox goes on from a memory snapshot,
// whose template service runs already. t0 is when the create call began,
// for the log.
func (m *Manager) finish(ctx context.Context, rec store.Sandbox, inst isolation.Instance, token string, tmpl *template.Template, envVars map[string]string, restored bool, caEnv map[string]string, log *slog.Logger, t0 time.Time) (store.Sandbox, error) {
	tInit := m.cfg.Now()
	if step, err := m.initialise(ctx, rec, inst, token, tmpl, envVars, !restored, caEnv); err != nil {
		return store.Sandbox{}, m.abort(ctx, rec, inst, log, step, err)
	}
	tRecord := m.cfg.Now()
	running, err := m.cfg.Store.UpdateSandbox(ctx, rec.ID, func(sb *store.Sandbox) error {
		sb.State = store.StateRunning
		sb.BackendState = inst.State()
		return nil
	})
	if err != nil {
		return store.Sandbox{}, m.abort(ctx, rec, inst, log, "recording running state", err)
	}
	rec = running
	m.register(m.newSandbox(rec, m.backends[rec.Backend], inst, log))
	end := m.cfg.Now()
	log.Info("sandbox running", "took", end.Sub(t0).Round(time.Millisecond))
	log.Debug("sandbox running: steps", "before_init", tInit.Sub(t0), "init_and_service", tRecord.Sub(tInit), "record", end.Sub(tRecord))
	return rec, nil
}

// initialise posts envd's /init in inst with the template's and envVars'
// env vars and rec's access token, presenting token, and, with service,
// starts the template's service and its recording: whenever the sandbox
// boots rather than goes on from memory, whose processes run on. Before, a sandbox behind an egress
// gateway gets its proxy's CA into its trust stores (installEgressCA), and
// the env vars that point runtimes with roots of their own at it; caEnv
// non-nil says it has them already (a warm pool member's, installed at
// its boot) and holds those env vars. On error it returns the step that
// failed.
func (m *Manager) initialise(ctx context.Context, rec store.Sandbox, inst isolation.Instance, token string, tmpl *template.Template, envVars map[string]string, service bool, caEnv map[string]string) (string, error) {
	env := maps.Clone(tmpl.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, envVars)
	if caEnv == nil {
		var err error
		if caEnv, err = m.trustEgressCA(ctx, rec, inst, token); err != nil {
			return "installing the egress CA", err
		}
	}
	for k, v := range caEnv {
		if _, set := env[k]; !set { // the template's or the request's wins
			env[k] = v
		}
	}
	body := initBody{
		EnvVars:        env,
		DefaultUser:    cmp.Or(tmpl.User, defaultUser),
		DefaultWorkdir: cmp.Or(tmpl.Workdir, defaultWorkdir),
		Timestamp:      m.cfg.Now(),
		AccessToken:    rec.EnvdAccessToken,
	}
	if err := initEnvd(ctx, inst, token, body); err != nil {
		return "initialising envd", err
	}
	if !service {
		return "", nil
	}
	if err := startService(ctx, inst, rec, tmpl); err != nil {
		return "starting the template's service", err
	}
	if tmpl.Spec.Recording != "" {
		if err := m.startRecording(ctx, inst, rec, tmpl); err != nil {
			return "starting the template's recording", err
		}
	}
	return "", nil
}

// trustEgressCA installs the CA of rec's egress proxy in inst
// (installEgressCA) and returns the env vars that point runtimes at it;
// nil when the sandbox has no gateway.
func (m *Manager) trustEgressCA(ctx context.Context, rec store.Sandbox, inst isolation.Instance, token string) (map[string]string, error) {
	if m.cfg.Network == nil || !inst.Link().Gateway.IsValid() {
		return nil, nil
	}
	ca, err := m.cfg.Network.EgressCA(rec.ID)
	if err != nil {
		return nil, fmt.Errorf("finding the egress CA: %w", err)
	}
	return installEgressCA(ctx, inst, token, ca)
}

// initBody is envd's POST /init request (internal/envd/init.go).
type initBody struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    string            `json:"accessToken"`
	DefaultUser    string            `json:"defaultUser"`
	DefaultWorkdir string            `json:"defaultWorkdir"`
	Timestamp      time.Time         `json:"timestamp"`
}

// rootImage sets spec.RootImage from tmpl when backend boots from an
// image.
func (m *Manager) rootImage(ctx context.Context, backend isolation.Backend, spec *isolation.Spec, tmpl *template.Template) error {
	if !backend.Capabilities().RootImage {
		return nil
	}
	if m.cfg.Images == nil {
		return fmt.Errorf("the %s backend boots from an image and this server makes none", backend.Name())
	}
	image, err := m.cfg.Images.Ext4(ctx, tmpl)
	if err != nil {
		return err
	}
	spec.RootImage = image
	return nil
}

// waitEnvd waits, at most envdTimeout, for envd in a sandbox the backend
// has just started.
func waitEnvd(ctx context.Context, inst isolation.Instance) error {
	ctx, cancel := context.WithTimeout(ctx, envdTimeout)
	defer cancel()
	return isolation.WaitEnvd(ctx, inst)
}

// initEnvd posts body to envd's /init with token, the access token envd
// has now, once envd answers (waitEnvd), within initTimeout.
func initEnvd(ctx context.Context, inst isolation.Instance, token string, body initBody) error {
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	client := envdClient(inst)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://envd/init", bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("POST /init: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST /init: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// idAlphabet is what sandbox IDs are made of after the leading "i".
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// maxIDLength bounds a given sandbox ID: "<port>-<id>" is one DNS label
// (63 characters at most) of the sandbox's hosts.
const maxIDLength = 63 - len("65535-")

// RoutableID reports whether id can be a sandbox's ID: lower-case letters
// and digits, as the router's host and header routes take them, short
// enough for a host label.
func RoutableID(id string) bool {
	return id != "" && len(id) <= maxIDLength && strings.Trim(id, idAlphabet) == ""
}

// NewID returns "i" and 20 random characters of [a-z0-9], as E2B's IDs:
// a new sandbox's, here and for the Sandbox objects of cluster mode's API
// replicas.
func NewID() string { return newIDWith('i') }

// newIDWith returns prefix and 20 random characters of [a-z0-9].
func newIDWith(prefix byte) string {
	const n = 20
	out := make([]byte, 0, n+1)
	out = append(out, prefix)
	var buf [32]byte
	for len(out) < n+1 {
		rand.Read(buf[:])
		for _, b := range buf {
			// 252 = 7*36: reject the rest so every character is equally likely.
			if b < 252 && len(out) < n+1 {
				out = append(out, idAlphabet[b%36])
			}
		}
	}
	return string(out)
}

// newToken returns a random access token (64 hex digits).
func newToken() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// denyPublicTraffic reports whether the create-time network config sets
// allowPublicTraffic to false, which makes the sandbox's user ports need a
// traffic access token.
func denyPublicTraffic(network []byte) bool {
	if len(network) == 0 {
		return false
	}
	var n struct {
		AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	}
	if err := json.Unmarshal(network, &n); err != nil {
		return false
	}
	return n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic
}
