package replay

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/trace"
)

const agreeConfig = `
origin: http://127.0.0.1:9
domains:
  - name: api
    hosts: [api.test]
    rules:
      - {name: per-ip, limit: 2, period: 1h, key: [ip]}
      - {name: per-token, limit: 100, period: 1h, key: ["header:X-Api-Key"]}
`

// edgeLine is a line of edge's JSON access log, as AppendJSON writes it,
// at second sec, from client, with the rules' live outcomes.
func edgeLine(sec int, client, perIP, perToken string, extra string) string {
	outcome, refused := "served", ""
	if perIP != "allowed" {
		outcome, refused = "blocked", `,"refused_by":"per-ip"`
	}
	return fmt.Sprintf(`{"time":"2026-12-02T12:00:%02d.000Z","peer":"127.0.0.1","client":%q,"host":"api.test","method":"GET","target":"/a","proto":"HTTP/1.1","status":200,"bytes":2,"duration_ms":0.100,"domain":"api","referer":"","user_agent":"","outcome":%q,"rules":[{"name":"per-ip","outcome":%q,"limit":2,"remaining":0},{"name":"per-token","outcome":%q,"limit":100,"remaining":99%s}]%s%s}`,
		sec, client, outcome, perIP, perToken, "", refused, extra)
}

func readLines(t *testing.T, lines ...string) []trace.Record {
	t.Helper()
	var recs []trace.Record
	st, err := trace.ReadLog(strings.NewReader(strings.Join(lines, "\n")+"\n"), trace.FormatAuto, func(r trace.Record) { recs = append(recs, r) })
	if err != nil || st.Skipped > 0 {
		t.Fatalf("reading: %v, %+v", err, st)
	}
	if !st.Edge {
		t.Fatal("edge's log not recognised by its first line")
	}
	return recs
}

// TestAgree: replaying edge's lines through the configuration agrees
// with the live decisions where they are right, finds the one that is
// not, skips the header-keyed rule with its reason, sorts lines written
// out of order, and weights a sampled line.
func TestAgree(t *testing.T) {
	table, err := config.Parse([]byte(agreeConfig))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		lines       []string
		ratio       float64
		decisions   float64
		approximate bool
	}{
		{"live decisions", []string{
			edgeLine(1, "192.0.2.1", "allowed", "allowed", ""),
			edgeLine(2, "192.0.2.1", "allowed", "allowed", ""),
			edgeLine(3, "192.0.2.1", "limited", "allowed", ""),
			edgeLine(4, "192.0.2.2", "allowed", "allowed", ""),
		}, 1, 4, false},
		{"written out of order", []string{
			edgeLine(3, "192.0.2.1", "limited", "allowed", ""),
			edgeLine(1, "192.0.2.1", "allowed", "allowed", ""),
			edgeLine(2, "192.0.2.1", "allowed", "allowed", ""),
		}, 1, 3, false},
		{"a wrong line", []string{
			edgeLine(1, "192.0.2.1", "allowed", "allowed", ""),
			edgeLine(2, "192.0.2.1", "allowed", "allowed", ""),
			edgeLine(3, "192.0.2.1", "allowed", "allowed", ""),
		}, 2.0 / 3, 3, false},
		{"sampled refusals", []string{
			edgeLine(1, "192.0.2.1", "allowed", "allowed", ""),
			edgeLine(2, "192.0.2.1", "allowed", "allowed", ""),
			edgeLine(3, "192.0.2.1", "limited", "allowed", `,"sample":10`),
		}, 1, 12, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Agree(readLines(t, tt.lines...), table)
			if err != nil {
				t.Fatal(err)
			}
			if a.Ratio != tt.ratio || a.Decisions != tt.decisions || a.Approximate != tt.approximate {
				t.Errorf("got %v of %v decisions (approximate %v), want %v of %v (%v)", a.Ratio, a.Decisions, a.Approximate, tt.ratio, tt.decisions, tt.approximate)
			}
			if len(a.Skips) != 1 || a.Skips[0].Rule != "api/per-token" || !strings.Contains(a.Skips[0].Reason, "access_log.keys") {
				t.Errorf("skips: got %+v, want api/per-token, for want of keys", a.Skips)
			}
		})
	}
}

// TestAgreeByRecordedKey: with keys in the lines a header-keyed rule is
// compared, keyed by the key recorded.
func TestAgreeByRecordedKey(t *testing.T) {
	table, err := config.Parse([]byte(strings.Replace(agreeConfig, "limit: 100,", "limit: 1,", 1)))
	if err != nil {
		t.Fatal(err)
	}
	line := func(sec int, token, outcome string) string {
		return fmt.Sprintf(`{"time":"2026-12-02T12:00:%02d.000Z","client":"192.0.2.%d","domain":"api","method":"GET","target":"/","outcome":"x","rules":[{"name":"per-ip","outcome":"allowed","limit":2,"remaining":1,"key":"192.0.2.%d"},{"name":"per-token","outcome":%q,"limit":1,"remaining":0,"key":%q}]}`,
			sec, sec, sec, outcome, token)
	}
	a, err := Agree(readLines(t, line(1, "k1", "allowed"), line(2, "k1", "limited"), line(3, "k2", "allowed")), table)
	if err != nil {
		t.Fatal(err)
	}
	if a.Ratio != 1 || a.Decisions != 6 || len(a.Skips) != 0 {
		t.Errorf("got %v of %v decisions, skips %+v; want all 6, none skipped", a.Ratio, a.Decisions, a.Skips)
	}
}
