package node

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestConfigValidate(t *testing.T) {
	good := Config{
		Namespace: "ns", Name: "n1", Address: "10.0.0.1:3000",
		Usage:         func() Usage { return Usage{} },
		LeaseDuration: DefaultLeaseDuration, RenewInterval: DefaultRenewInterval,
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // in the error
	}{
		{"no namespace", func(c *Config) { c.Namespace = "" }, "namespace"},
		{"no name", func(c *Config) { c.Name = "" }, "node name"},
		{"no address", func(c *Config) { c.Address = "" }, "address"},
		{"no usage", func(c *Config) { c.Usage = nil }, "usage"},
		{"short lease", func(c *Config) { c.LeaseDuration = time.Millisecond }, "lease duration"},
		{"renew as long as the lease", func(c *Config) { c.RenewInterval = c.LeaseDuration }, "renew interval"},
		{"no renew interval", func(c *Config) { c.RenewInterval = 0 }, "renew interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestExpired(t *testing.T) {
	renewed := time.Unix(1700000000, 0)
	lease := func(renew *time.Time, seconds *int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: seconds}}
		if renew != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renew}
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		now   time.Time
		want  bool
	}{
		{"within its duration", lease(&renewed, ptr.To[int32](40)), renewed.Add(39 * time.Second), false},
		{"at its end", lease(&renewed, ptr.To[int32](40)), renewed.Add(40 * time.Second), false},
		{"past its end", lease(&renewed, ptr.To[int32](40)), renewed.Add(41 * time.Second), true},
		{"never renewed", lease(nil, ptr.To[int32](40)), renewed, true},
		{"no duration", lease(&renewed, nil), renewed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Expired(tc.lease, tc.now); got != tc.want {
				t.Errorf("Expired = %v, want %v", got, tc.want)
			}
		})
	}
}
