package replay

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// defaultCommand is a Command with edge replay's flag defaults.
func defaultCommand() Command {
	return Command{
		Limit: 100, Period: time.Minute, Algorithm: "sliding_window", Precision: "standard",
		Key: "ip", Format: "auto", IPv6Prefix: rules.DefaultIPv6Prefix, Scale: "ci",
		Percentile: 99.9, Headroom: 0.2, Given: map[string]bool{},
	}
}

// TestCommand checks a Command's contract without the command line: Check
// refuses what cannot run, and Run writes the report or says why not.
func TestCommand(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(*Command)
		checkErr string // a substring of Check's error; "" if it passes
		runErr   string // a substring of Run's error; "" if it succeeds
		out      string // a substring of Run's output
	}{
		{name: "synthetic", edit: func(c *Command) { c.Synthetic = "nearlimit" },
			out: "edge replay: synthetic nearlimit, default seeds, scale ci\n\n"},
		{name: "nothing to replay", edit: func(*Command) {},
			checkErr: `give log files to replay ("-" for standard input) or -synthetic NAME`},
		{name: "a given flag that does not apply", edit: func(c *Command) { c.Synthetic = "nearlimit"; c.Given["limit"] = true },
			checkErr: "-limit: not with -synthetic, whose scenarios carry their own rules"},
		{name: "config not loaded", edit: func(c *Command) { c.Config = "edge.yaml"; c.Files = []string{"access.log"} },
			runErr: "edge.yaml: the configuration was not loaded"},
		{name: "log from Stdin", edit: func(c *Command) {
			c.Files = []string{"-"}
			c.Stdin = strings.NewReader(`192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1` + "\n")
		}, out: "edge replay: -\n\n"},
		{name: "screened log lines", edit: func(c *Command) {
			c.Files = []string{"-"}
			c.Stdin = strings.NewReader(`192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET /v1/%79 HTTP/1.0" 200 1` + "\n" +
				`192.0.2.1 - - [10/Oct/2000:13:55:37 -0700] "GET /v1/%2Fy HTTP/1.0" 400 1` + "\n" +
				`192.0.2.1 - - [10/Oct/2000:13:55:38 -0700] "GET /v1/%zz HTTP/1.0" 400 1` + "\n")
		}, out: "screened 2 of 3 requests, which the proxy refuses before any rule; first: encoded '/' or '\\' in path\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultCommand()
			tt.edit(&c)
			err := c.Check()
			if tt.checkErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.checkErr) {
					t.Fatalf("Check: got %v, want %q", err, tt.checkErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check: got %v, want nil", err)
			}
			var stdout, stderr bytes.Buffer
			err = c.Run(context.Background(), &stdout, &stderr)
			if tt.runErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.runErr) {
					t.Fatalf("Run: got %v, want %q", err, tt.runErr)
				}
				return
			}
			if err != nil || !strings.Contains(stdout.String(), tt.out) {
				t.Errorf("Run: got %v and\n%s\nwant nil and output holding %q", err, stdout.String(), tt.out)
			}
		})
	}
}
