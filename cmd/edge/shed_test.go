package main

import (
	"net/http"
	"testing"

	"github.com/edgerate/edge/rules"
)

// TestShedExample checks what configs/shed.yaml's comments say: the
// thresholds of each class, and the classes of a few requests, header
// matches included (YAML header names reach edge lower-cased).
func TestShedExample(t *testing.T) {
	table, _, err := loadConfig("../../configs/shed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := table.Domains[0].Shed
	if want := [3]int64{rules.ClassNormal: 160, rules.ClassCritical: 200, rules.ClassSheddable: 100}; s.Limits != want {
		t.Errorf("got limits %v, want %v", s.Limits, want)
	}
	tests := []struct {
		name, method, path string
		header             http.Header
		want               rules.Class
	}{
		{"charge", "POST", "/v1/charges", nil, rules.ClassCritical},
		{"X-Priority: high", "GET", "/v1/items", http.Header{"X-Priority": {"high"}}, rules.ClassCritical},
		{"test mode", "POST", "/v1/items", http.Header{"X-Test-Mode": {"1"}}, rules.ClassSheddable},
		{"read", "GET", "/v1/items", nil, rules.ClassSheddable},
		{"write", "POST", "/v1/items", nil, rules.ClassNormal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Classify("api.example.com", tt.method, tt.path, tt.header); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
