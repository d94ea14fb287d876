package v1alpha1

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// full returns each kind with every field of its own set, so that a copy
// that shares memory with its original, or a field this test does not
// know, shows.
func full() []runtime.Object {
	started := metav1.NewTime(time.Unix(1700000000, 0))
	meta := metav1.ObjectMeta{Name: "n", Namespace: "ns", Labels: map[string]string{"a": "b"}}
	sb := Sandbox{
		TypeMeta:   metav1.TypeMeta{Kind: "Sandbox", APIVersion: GroupVersion.String()},
		ObjectMeta: meta,
		Spec: SandboxSpec{Template: "base", Timeout: metav1.Duration{Duration: time.Minute}, Metadata: map[string]string{"k": "v"}, Node: "n1", Secure: true,
			EnvVars: map[string]string{"E": "v"}, AllowInternetAccess: new(true), Network: []byte(`{"allowPublicTraffic":false}`), Pause: PauseMemory},
		Status: SandboxStatus{State: SandboxRunning, Node: "n1", Reason: "r", ErrorClass: ErrorInvalid, StartedAt: &started, EnvdAccessToken: "e", TrafficAccessToken: "t", TemplateID: "base-1a2b", Alias: "base", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, ObservedGeneration: 3},
	}
	node := SandboxNode{
		TypeMeta:   metav1.TypeMeta{Kind: "SandboxNode", APIVersion: GroupVersion.String()},
		ObjectMeta: meta,
		Spec:       SandboxNodeSpec{Address: "10.0.0.1:3000"},
		Status:     SandboxNodeStatus{Capacity: NodeCapacity{Sandboxes: 1, CPUs: 2, MemoryMiB: 3}, Sandboxes: 1, Templates: []string{"base"}, Warm: map[string][]string{"base": {"iwarm1"}}, Unschedulable: true},
	}
	return []runtime.Object{
		&sb,
		&SandboxList{TypeMeta: sb.TypeMeta, ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []Sandbox{sb}},
		&node,
		&SandboxNodeList{TypeMeta: node.TypeMeta, ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []SandboxNode{node}},
	}
}

func TestDeepCopy(t *testing.T) {
	for i, obj := range full() {
		name := reflect.TypeOf(obj).Elem().Name()
		t.Run(name, func(t *testing.T) {
			assertFull(t, name, reflect.ValueOf(obj).Elem())
			cp := obj.DeepCopyObject()
			if !reflect.DeepEqual(cp, obj) {
				t.Fatalf("copy differs from the original:\n%#v\n%#v", cp, obj)
			}
			// Change every map, slice and pointer target of the copy: the
			// original must stay as a fresh one is.
			want := full()[i]
			scribble(reflect.ValueOf(cp).Elem())
			if !reflect.DeepEqual(obj, want) {
				t.Errorf("changing the copy changed the original:\n%#v", obj)
			}
		})
	}
}

// assertFull fails for a zero field among the kind's own (ObjectMeta and
// ListMeta are apimachinery's, copied by its own DeepCopyInto).
func assertFull(t *testing.T, path string, v reflect.Value) {
	switch v.Type() {
	case reflect.TypeOf(metav1.ObjectMeta{}), reflect.TypeOf(metav1.ListMeta{}), reflect.TypeOf(metav1.TypeMeta{}), reflect.TypeOf(metav1.Time{}):
		return
	}
	if v.IsZero() {
		t.Errorf("%s is zero in the test's object: set it, and copy it in deepcopy.go if it is a map, slice or pointer", path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			assertFull(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case reflect.Slice:
		for i := range v.Len() {
			assertFull(t, path+"[]", v.Index(i))
		}
	case reflect.Pointer:
		assertFull(t, path, v.Elem())
	}
}

// scribble changes, in place, every string reached through a map, a slice
// or a pointer under v.
func scribble(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				scribble(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			if v.Index(i).Kind() == reflect.String {
				v.Index(i).SetString("changed")
			}
			scribble(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if e := v.MapIndex(k); e.Kind() == reflect.String {
				v.SetMapIndex(k, reflect.ValueOf("changed"))
			} else {
				scribble(e) // a slice's elements are its array's: changed in place
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			e := v.Elem()
			if t, ok := e.Addr().Interface().(*metav1.Time); ok {
				t.Time = t.Add(time.Hour)
			}
			scribble(e)
		}
	}
}
