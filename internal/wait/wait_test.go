package wait

import (
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestFor(t *testing.T) {
	tests := []struct {
		name     string
		trueAt   time.Duration // when cond starts to hold; 0: at once
		within   time.Duration
		wantTook time.Duration // fake time For returns
		wantFail string
	}{
		{"holds at once", 0, time.Second, 0, ""},
		{"holds after 100ms", 100 * time.Millisecond, time.Second, 100 * time.Millisecond, ""},
		{"never within the bound", time.Hour, time.Second, 0, "timed out after 1s waiting for the flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				rec := &fatalRecorder{TB: t}
				var took time.Duration
				done := make(chan struct{})
				go func() {
					defer close(done)
					took = For(rec, tt.within, "the flag", func() bool { return time.Since(start) >= tt.trueAt })
				}()
				<-done
				if rec.msg != tt.wantFail {
					t.Errorf("failure: got %q, want %q", rec.msg, tt.wantFail)
				}
				// The pause between polls is at most 20 ms, so For notices
				// within that.
				if tt.wantFail == "" && (took < tt.wantTook || took > tt.wantTook+maxInterval) {
					t.Errorf("took %v, want %v to %v", took, tt.wantTook, tt.wantTook+maxInterval)
				}
			})
		})
	}
}
