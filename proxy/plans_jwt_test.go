package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/edgerate/edge/rules"
)

// TestPlansFromClaims: api_keys keyed by a verified token's client_id,
// the plan from its plan claim (plan_from: jwt:plan) for clients the file
// does not list, the file winning for those it lists; no token, 403.
func TestPlansFromClaims(t *testing.T) {
	t.Setenv(testSecretEnv, string(testSecret))
	origin, _ := newOrigin(t, "o")
	r := rule("rate", 1, time.Minute)
	r.Key = []string{"jwt:client_id"}
	r.Plans = map[string]rules.PlanConfig{"gold": {Limit: 3}}
	cfg := oneDomain(origin.URL, r)
	cfg.Domains[0].JWT = &rules.JWTConfig{HMACSecretEnv: testSecretEnv, Algorithms: []string{"HS256"},
		Issuer: "https://id.example", Audiences: []string{"api"}}
	cfg.Domains[0].APIKeys = &rules.APIKeysConfig{From: "jwt:client_id", PlanFrom: "jwt:plan", Required: true,
		File: "keys.yaml", Keys: map[string]string{"c-listed": "free"}}
	e := newEnv(t, cfg)
	now := e.clock.Now()
	send := func(client, plan string) int {
		hdr := map[string]string{}
		if client != "" {
			hdr["Authorization"] = "Bearer " + userToken(t, now, "u", jwt.MapClaims{"client_id": client, "plan": plan})
		}
		resp, _ := e.do("GET", "api.example.com", "/", hdr, "")
		return resp.StatusCode
	}
	var got []int
	for range 4 {
		got = append(got, send("c-claimed", "gold"))
	}
	for range 2 {
		got = append(got, send("c-listed", "gold")) // the file says free
	}
	got = append(got, send("", ""))
	if fmt.Sprint(got) != "[200 200 200 429 200 429 403]" {
		t.Errorf("got %v, want [200 200 200 429 200 429 403]", got)
	}
}
