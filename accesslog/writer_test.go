package accesslog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWriterWritesEverySecond: a line held is in the file a second later
// at the latest, and not before the writer's pace says (the buffer is far
// from half full).
func TestWriterWritesEverySecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "access.log")
		w, err := Open(Options{Path: path, Buffer: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close(nil)
		w.Write([]byte("one\n"))
		synctest.Wait()
		if got := readFile(t, path); got != "" {
			t.Errorf("before a second: got %q, want nothing yet", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := readFile(t, path); got != "one\n" {
			t.Errorf("after a second: got %q, want %q", got, "one\n")
		}
	})
}

// gate is an output whose writes wait until it is opened.
type gate struct {
	entered chan struct{}
	open    chan struct{}
	mu      sync.Mutex
	got     strings.Builder
}

func (g *gate) Write(b []byte) (int, error) {
	g.entered <- struct{}{}
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got.Write(b)
}

// TestWriterFullBufferDrops: while the file does not take what is held,
// a line that does not fit is dropped and counted, and Write returns at
// once; the lines that fitted are written once the file takes them.
func TestWriterFullBufferDrops(t *testing.T) {
	g := &gate{entered: make(chan struct{}, 1), open: make(chan struct{})}
	var c Counters
	w, err := Open(Options{Path: "-", Stdout: g, Buffer: 100, Counters: &c})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("a", 59) + "\n"
	w.Write([]byte(line)) // past half: the writer takes it, and waits on the gate
	<-g.entered
	w.Write([]byte(line)) // held
	done := make(chan struct{})
	go func() {
		w.Write([]byte(line)) // no room: dropped, not waited for
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write waited for the file")
	}
	if got := c.Dropped.Load(); got != 1 {
		t.Errorf("dropped: got %d, want 1", got)
	}
	close(g.open)
	w.Close(nil)
	if got := g.got.String(); got != line+line {
		t.Errorf("written: got %d bytes, want the two lines that fitted (%d)", len(got), 2*len(line))
	}
	if got := c.Lines.Load(); got != 2 {
		t.Errorf("lines: got %d, want 2", got)
	}
}

// TestWriterDiskFull: writes to /dev/full fail; each is counted, the
// failure reported at most once a second with the count held back, and
// Write goes on taking lines.
func TestWriterDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	synctest.Test(t, func(t *testing.T) {
		var c Counters
		var reports []uint64
		w, err := Open(Options{Path: "/dev/full", Buffer: 64, Counters: &c, Failed: func(err error, unreported uint64) {
			if !errors.Is(err, errNoSpace) && !strings.Contains(err.Error(), "no space") {
				t.Errorf("reported %v, want no space left", err)
			}
			reports = append(reports, unreported)
		}})
		if err != nil {
			t.Fatal(err)
		}
		// 3 seconds, a flush every half second (each line fills half the buffer).
		for range 6 {
			w.Write([]byte(strings.Repeat("x", 40) + "\n"))
			synctest.Wait()
			time.Sleep(500 * time.Millisecond)
		}
		w.Close(nil)
		if got := c.Failed.Load(); got != 6 {
			t.Errorf("failed writes: got %d, want 6", got)
		}
		if len(reports) < 2 || len(reports) > 4 {
			t.Errorf("reports: got %d (%v), want one a second over 3s", len(reports), reports)
		}
		var total uint64
		for _, r := range reports {
			total += r
		}
		if total+uint64(len(reports)) > 6 {
			t.Errorf("reports %v count more failures than the 6 there were", reports)
		}
	})
}

var errNoSpace = errors.New("no space left on device")

// TestWriterReopen: after the file is renamed and Reopen, the old file
// gets no new line, the new one every later one; what was held before
// goes to the old one.
func TestWriterReopen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path, rotated := filepath.Join(dir, "access.log"), filepath.Join(dir, "access.log.1")
		w, err := Open(Options{Path: path, Buffer: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("before\n"))
		time.Sleep(time.Second)
		synctest.Wait()
		if err := os.Rename(path, rotated); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("held\n")) // held while the file is renamed: still the old file's
		w.Reopen()
		synctest.Wait()
		w.Write([]byte("after\n"))
		w.Close(nil)
		if got := readFile(t, rotated); got != "before\nheld\n" {
			t.Errorf("rotated file: got %q, want %q", got, "before\nheld\n")
		}
		if got := readFile(t, path); got != "after\n" {
			t.Errorf("new file: got %q, want %q", got, "after\n")
		}
	})
}

// TestWriterCloseHandsOver: Close writes out what is held; a line
// written after it goes to the successor, none is lost.
func TestWriterCloseHandsOver(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	wa, err := Open(Options{Path: a, Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := Open(Options{Path: b, Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	const n = 2000
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				wa.Write([]byte{byte('a' + i), '\n'})
			}
		}()
	}
	time.Sleep(time.Millisecond)
	wa.Close(wb)
	wg.Wait()
	wb.Close(nil)
	lines := strings.Count(readFile(t, a), "\n") + strings.Count(readFile(t, b), "\n")
	if lines != 4*n {
		t.Errorf("lines in both files: got %d, want %d", lines, 4*n)
	}
	wa.Close(nil) // again: nothing
}

func TestOpenFails(t *testing.T) {
	if _, err := Open(Options{Path: filepath.Join(t.TempDir(), "no", "such", "dir"), Buffer: 10}); err == nil {
		t.Error("opening in a missing directory: got no error")
	}
	if _, err := Open(Options{Path: "-", Buffer: 0}); err == nil {
		t.Error("buffer 0: got no error")
	}
}
