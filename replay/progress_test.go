package replay

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestReplayProgressStops checks that the progress bar draws when asked
// and that its goroutine ends with the replay.
func TestReplayProgressStops(t *testing.T) {
	var errb bytes.Buffer
	b := startProgress(&errb, true, 10)
	b.update(5)
	b.stop()
	select {
	case <-b.done:
	default:
		t.Fatal("progress goroutine still running after stop")
	}
	if got := errb.String(); !strings.Contains(got, "50% 5/10 sources") {
		t.Errorf("progress output %q, want 50%% 5/10", got)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writing goroutine and a
// reading test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReplayProgressLines checks that off a terminal, without -progress,
// replay writes a progress line every 10 s and nothing else, on a fake
// clock (testing/synctest), and that its goroutine ends with stop.
func TestReplayProgressLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		b := startProgress(&out, false, 10)
		steps := []struct {
			name  string
			done  int           // sources finished before the wait
			sleep time.Duration // then this much fake time passes
			want  string        // all output so far
		}{
			{"nothing before 10s", 3, 9*time.Second + 999*time.Millisecond, ""},
			{"a line at 10s", 3, time.Millisecond,
				"edge replay: 3/10 sources (30%) after 10s\n"},
			{"another at 20s", 7, 10 * time.Second,
				"edge replay: 3/10 sources (30%) after 10s\nedge replay: 7/10 sources (70%) after 20s\n"},
		}
		for _, st := range steps {
			b.update(st.done)
			time.Sleep(st.sleep)
			synctest.Wait()
			if got := out.String(); got != st.want {
				t.Errorf("%s: got %q, want %q", st.name, got, st.want)
			}
		}
		b.stop() // synctest.Test fails if the goroutine outlives the bubble
		if got, want := out.String(), steps[len(steps)-1].want; got != want {
			t.Errorf("after stop: got %q, want %q (no bar, no extra line)", got, want)
		}
		if b.bar {
			t.Error("progress drawn as a bar on a buffer without -progress")
		}
	})
}
