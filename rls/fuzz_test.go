package rls

import (
	"os"
	"path/filepath"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// FuzzParse: the loader never panics on any file, and a file it accepts
// can be matched against any descriptor.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/lyft/*.yaml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "key", "value")
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - &a {key: k, descriptors: [*a]}\n"), "k", "v")
	f.Add([]byte("a: &a [*a, *a]\n"), "k", "")
	f.Add([]byte("domain: d\ndescriptors: [{key: k, value: 'a*b*', rate_limit: {unit: second, requests_per_unit: 1}}]\n"), "k", "axxb")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		c, err := Parse([]File{{Name: "f.yaml", Data: data}}, false)
		if err != nil {
			return
		}
		for _, d := range c.Domains {
			en := []*rlspb.RateLimitDescriptor_Entry{{Key: key, Value: value}}
			d.Match(en)
			d.Match(append(en, en...))
			d.appendName(nil, en)
		}
	})
}
