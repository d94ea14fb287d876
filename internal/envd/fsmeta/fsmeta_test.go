package fsmeta

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		md      map[string]string
		wantErr bool
	}{
		{name: "empty", md: nil},
		{name: "plain", md: map[string]string{"owner": "alice", "k-2": "v with spaces"}},
		{name: "empty key", md: map[string]string{"": "v"}, wantErr: true},
		{name: "key at the limit", md: map[string]string{strings.Repeat("k", MaxKeyLen): "v"}},
		{name: "key over the limit", md: map[string]string{strings.Repeat("k", MaxKeyLen+1): "v"}, wantErr: true},
		{name: "non-ascii value", md: map[string]string{"k": "é"}, wantErr: true},
		{name: "control character", md: map[string]string{"k": "a\nb"}, wantErr: true},
		{name: "total over the limit", md: map[string]string{"a": strings.Repeat("x", 3000), "b": strings.Repeat("x", 1200)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.md)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}
