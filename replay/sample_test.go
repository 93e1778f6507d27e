package replay

import (
	"context"
	"testing"

	"github.com/edgerate/edge/trace"
)

// TestSampleMatchesTheExactLog checks the accuracy sample's figures against
// the exact comparison: sampling every source, its count-all verdicts are
// CountAll's, request by request in total; sampling fewer, it takes the
// sources window.Sampled picks and no more requests than they sent.
func TestSampleMatchesTheExactLog(t *testing.T) {
	ins, err := SyntheticInputs("nearlimit", 0, trace.CI)
	if err != nil {
		t.Fatal(err)
	}
	in := ins[0]
	for _, tc := range []struct {
		name        string
		every       int
		interleaved bool
	}{
		{name: "every source", every: 1},
		{name: "every source, interleaved", every: 1, interleaved: true},
		{name: "1 in 3", every: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Run(context.Background(), in, Options{Sample: tc.every, Interleaved: tc.interleaved})
			if err != nil {
				t.Fatal(err)
			}
			s := rep.Sample
			if s == nil {
				t.Fatal("no sample report")
			}
			if tc.every == 1 {
				c := rep.CountAll
				if s.Sources != rep.Sources || s.Requests != rep.Requests || s.CountAll.Judged != rep.Requests {
					t.Errorf("got %d sources, %d requests, %d judged; want %d, %d, %d", s.Sources, s.Requests, s.CountAll.Judged, rep.Sources, rep.Requests, rep.Requests)
				}
				if s.CountAll.WronglyAllowed != c.WronglyAllowed || s.CountAll.WronglyLimited != c.WronglyLimited {
					t.Errorf("sample count-all wrongly allowed %d, limited %d; exact log %d, %d",
						s.CountAll.WronglyAllowed, s.CountAll.WronglyLimited, c.WronglyAllowed, c.WronglyLimited)
				}
				if c.WronglyAllowed+c.WronglyLimited == 0 {
					t.Error("nothing misjudged: the input does not test the sample")
				}
				return
			}
			if s.Sources == 0 || s.Sources >= rep.Sources || s.Requests >= rep.Requests {
				t.Errorf("1 in %d took %d of %d sources, %d of %d requests", tc.every, s.Sources, rep.Sources, s.Requests, rep.Requests)
			}
			if s.CountAll.Judged != s.Requests || s.CountAdmitted.Judged != s.Requests {
				t.Errorf("judged %d and %d of %d sampled requests, want all", s.CountAll.Judged, s.CountAdmitted.Judged, s.Requests)
			}
		})
	}
}
