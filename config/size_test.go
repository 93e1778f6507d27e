package config

import (
	"strings"
	"testing"

	"github.com/edgerate/edge/rules"
)

// TestSizeKeys decodes every size key from YAML in each accepted form, and
// checks that a value in any other form names its path and value.
func TestSizeKeys(t *testing.T) {
	const site = "origin: \"http://127.0.0.1:9\"\ndomains: [{hosts: [\"*\"]%s}]\n"
	tests := []struct {
		name   string
		top    string // top-level lines
		domain string // extra keys of the domain, ", key: value"
		want   rules.BodyPolicy
		total  rules.Size
		err    string
	}{
		{name: "defaults", want: rules.BodyPolicy{Buffer: true, BufferSize: rules.MiB}, total: 256 * rules.MiB},
		{name: "units", top: "request_buffer: 64KiB\nmax_request_body: 10MiB\nmax_buffered_bytes: 1GiB\n",
			want: rules.BodyPolicy{Buffer: true, BufferSize: 64 * rules.KiB, MaxSize: 10 * rules.MiB}, total: rules.GiB},
		{name: "plain integers", top: "request_buffer: 65536\nmax_request_body: \"1000\"\n",
			want: rules.BodyPolicy{Buffer: true, BufferSize: 64 * rules.KiB, MaxSize: 1000}, total: 256 * rules.MiB},
		{name: "whole float", top: "max_request_body: 2048.0\n",
			want: rules.BodyPolicy{Buffer: true, BufferSize: rules.MiB, MaxSize: 2 * rules.KiB}, total: 256 * rules.MiB},
		{name: "domain keys", domain: ", request_buffer: 4KiB, max_request_body: 512B",
			want: rules.BodyPolicy{Buffer: true, BufferSize: 4 * rules.KiB, MaxSize: 512}, total: 256 * rules.MiB},
		{name: "domain not buffering", domain: ", request_buffering: false, max_request_body: 512B",
			want: rules.BodyPolicy{Buffer: false, BufferSize: rules.MiB, MaxSize: 512}, total: 256 * rules.MiB},
		{name: "domain buffer size while not buffering", domain: ", request_buffering: false, request_buffer: 4KiB",
			err: "domains[0] (_).request_buffer: applies only with request_buffering true (false streams bodies unbuffered), got 4KiB"},
		{name: "decimal unit", top: "request_buffer: 1MB\n",
			err: `request_buffer: must be a size such as 64KiB or 1MiB (units B, KiB, MiB, GiB) or a whole number of bytes, got "1MB"`},
		{name: "fraction", domain: ", max_request_body: 10.5",
			err: "domains[0] (_).max_request_body: must be a whole number of bytes, got 10.5"},
		{name: "fraction with unit", top: "max_buffered_bytes: 1.5GiB\n",
			err: `max_buffered_bytes: must be a size such as 64KiB or 1MiB (units B, KiB, MiB, GiB) or a whole number of bytes, got "1.5GiB"`},
		{name: "list", top: "request_buffer: [1]\n",
			err: "request_buffer: must be a size such as 64KiB or 1MiB, or a whole number of bytes, got [1]"},
		{name: "out of range", top: "request_buffer: 10B\n",
			err: "request_buffer: must be between 1KiB and 1GiB, got 10B"},
		{name: "buffering not a bool", domain: ", request_buffering: sometimes",
			err: "domains[0] (_).request_buffering"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := Parse([]byte(tt.top + strings.Replace(site, "%s", tt.domain, 1)))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := table.Domains[0].Body; got != tt.want || table.MaxBufferedBytes != tt.total {
				t.Errorf("got %+v, total %s, want %+v, total %s", got, table.MaxBufferedBytes, tt.want, tt.total)
			}
		})
	}
}
