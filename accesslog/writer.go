package accesslog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Counters are a writer's counts, kept across the writers a process
// opens (a reload's new file): the caller makes one and hands it to each.
// They are safe for concurrent use.
type Counters struct {
	Dropped atomic.Uint64 // lines dropped because the buffer was full
	Failed  atomic.Uint64 // writes that failed (each may lose a buffer's lines)
	Lines   atomic.Uint64 // lines written out
}

// Options configure a [Writer].
type Options struct {
	// Path is the file lines are appended to, created with mode 0644 if
	// missing, or "-" for Stdout.
	Path string
	// Buffer bounds the bytes of lines held; a line that does not fit is
	// dropped (Counters.Dropped). At least 1.
	Buffer int
	// Counters receive the counts; nil keeps them to the writer.
	Counters *Counters
	// Failed is called with a failed write's or reopen's error, at most
	// once a second, with how many failures were not reported since; nil
	// reports none. It runs on the writer's goroutine.
	Failed func(err error, unreported uint64)
	// Stdout is where "-" writes; nil is os.Stdout.
	Stdout io.Writer
}

// flushEvery is how often held lines are written out at the latest.
const flushEvery = time.Second

// A Writer holds lines in a bounded buffer that its goroutine writes to
// the file when half of it is used and at least once a second. Write never
// waits for the file. Close writes out what is held; lines written after
// Close go to the writer's successor, if it has one, so that a reload
// loses none. Its methods are safe for concurrent use.
type Writer struct {
	path     string
	limit    int
	counters *Counters
	failed   func(error, uint64)

	mu     sync.Mutex
	buf    []byte  // lines held
	closed bool    // no more lines are held here: they go to next
	next   *Writer // set by Close

	out        io.Writer // the file (or Stdout)
	file       *os.File  // nil for Stdout
	kick       chan struct{}
	reopen     chan struct{}
	flushes    chan chan struct{}
	stop       chan struct{}
	done       chan struct{}
	lastReport time.Time
	unreported uint64
}

// Open opens o.Path and starts the writer's goroutine, which runs until
// Close.
func Open(o Options) (*Writer, error) {
	if o.Buffer < 1 {
		return nil, errors.New("accesslog: buffer must be at least 1 byte")
	}
	w := &Writer{path: o.Path, limit: o.Buffer, counters: o.Counters, failed: o.Failed,
		kick: make(chan struct{}, 1), reopen: make(chan struct{}, 1), flushes: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if w.counters == nil {
		w.counters = new(Counters)
	}
	if o.Path == "-" {
		w.out = o.Stdout
		if w.out == nil {
			w.out = os.Stdout
		}
	} else {
		f, err := openFile(o.Path)
		if err != nil {
			return nil, err
		}
		w.out, w.file = f, f
	}
	w.buf = make([]byte, 0, min(o.Buffer, 64<<10))
	go w.run()
	return w, nil
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// Path returns the path the writer was opened with.
func (w *Writer) Path() string { return w.path }

// Write holds line (one or more whole lines) for writing, or drops it
// when the buffer has no room for it. It never waits for the file, and
// does not keep line.
func (w *Writer) Write(line []byte) {
	w.mu.Lock()
	if w.closed {
		next := w.next
		w.mu.Unlock()
		if next != nil {
			next.Write(line)
		} else {
			w.counters.Dropped.Add(1)
		}
		return
	}
	if len(w.buf)+len(line) > w.limit {
		w.mu.Unlock()
		w.counters.Dropped.Add(1)
		w.wake()
		return
	}
	w.buf = append(w.buf, line...)
	half := len(w.buf) >= w.limit/2
	w.mu.Unlock()
	if half {
		w.wake()
	}
}

func (w *Writer) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Reopen closes and reopens the file, after writing out what is held, as
// logrotate's postrotate expects (SIGUSR1); for Stdout it only writes out.
// It returns at once: the writer's goroutine reopens.
func (w *Writer) Reopen() {
	select {
	case w.reopen <- struct{}{}:
	default:
	}
}

// Flush writes out what is held now, and returns when it is written (or
// the writer is closed).
func (w *Writer) Flush() {
	ack := make(chan struct{})
	select {
	case w.flushes <- ack:
		<-ack
	case <-w.done:
	}
}

// Close writes out what is held, closes the file and stops the writer's
// goroutine; later lines go to next (nil: they are dropped and counted).
// It waits for the goroutine. Calling it again does nothing.
func (w *Writer) Close(next *Writer) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.closed, w.next = true, next
	w.mu.Unlock()
	close(w.stop)
	<-w.done
}

// run is the writer's goroutine: it writes out what is held at least once
// a second, when woken by a half-full buffer, and before it reopens or
// stops.
func (w *Writer) run() {
	defer close(w.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	var spare []byte
	for {
		select {
		case <-t.C:
		case <-w.kick:
		case ack := <-w.flushes:
			spare = w.flush(spare)
			close(ack)
			continue
		case <-w.reopen:
			spare = w.flush(spare)
			if w.file != nil {
				_ = w.file.Close()
				f, err := openFile(w.path)
				if err != nil {
					w.out, w.file = failing{err}, nil
					w.report(err)
					continue
				}
				w.out, w.file = f, f
			} else if f, ok := w.out.(failing); ok && w.path != "-" {
				// The last reopen failed: try again.
				if nf, err := openFile(w.path); err == nil {
					w.out, w.file = nf, nf
				} else {
					w.report(f.err)
				}
			}
			continue
		case <-w.stop:
			w.flush(spare)
			if w.file != nil {
				_ = w.file.Close()
			}
			return
		}
		spare = w.flush(spare)
	}
}

// flush writes out what is held, swapping in spare as the new buffer so
// that writers wait for no I/O, and returns the buffer written as the next
// spare.
func (w *Writer) flush(spare []byte) []byte {
	w.mu.Lock()
	b := w.buf
	w.buf = spare[:0]
	w.mu.Unlock()
	if len(b) == 0 {
		return b
	}
	if _, err := w.out.Write(b); err != nil {
		w.counters.Failed.Add(1)
		w.report(err)
	} else {
		w.counters.Lines.Add(uint64(countLines(b)))
	}
	if cap(b) > 4<<20 && cap(b) > w.limit/4 {
		return nil // not kept: a burst's size
	}
	return b[:0]
}

// report passes err to Failed at most once a second.
func (w *Writer) report(err error) {
	now := time.Now()
	if w.failed == nil {
		return
	}
	if !w.lastReport.IsZero() && now.Sub(w.lastReport) < time.Second {
		w.unreported++
		return
	}
	w.failed(err, w.unreported)
	w.lastReport, w.unreported = now, 0
}

func countLines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// failing is the output of a writer whose file could not be reopened.
type failing struct{ err error }

func (f failing) Write([]byte) (int, error) { return 0, f.err }
