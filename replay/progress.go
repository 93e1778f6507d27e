package replay

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progressBar reports replay progress on standard error. On a terminal,
// or with -progress, it redraws a bar four times a second; otherwise it
// writes a line every progressEvery, so that a log (CI's, say) shows a long
// replay is alive without filling with redraws. Its goroutine is started
// by startProgress and ended by stop.
type progressBar struct {
	bar   bool // redraw a bar; else write lines
	w     io.Writer
	total int
	start time.Time

	mu   sync.Mutex
	base int // sources of the inputs already finished
	cur  int // sources finished of the current input

	quit chan struct{}
	done chan struct{}
}

// progressEvery is how often progress is written when it is not drawn as
// a bar.
const progressEvery = 10 * time.Second

// startProgress starts reporting progress over total sources: as a bar when
// force is set or w is a terminal, else as a line every progressEvery.
func startProgress(w io.Writer, force bool, total int) *progressBar {
	b := &progressBar{w: w, total: max(total, 1), start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	b.bar = force || isTerminal(w)
	every := progressEvery
	if b.bar {
		every = 250 * time.Millisecond
	}
	go func() {
		defer close(b.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-b.quit:
				if b.bar {
					b.draw()
					fmt.Fprintln(b.w)
				}
				return
			case <-tick.C:
				if b.bar {
					b.draw()
				} else {
					b.line()
				}
			}
		}
	}()
	return b
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// update records that done sources of the current input are finished. It
// is safe to call from several goroutines.
func (b *progressBar) update(done int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = max(b.cur, done)
}

// next moves on to the next input after n sources.
func (b *progressBar) next(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.base += n
	b.cur = 0
}

// finished returns the sources finished so far.
func (b *progressBar) finished() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return min(b.base+b.cur, b.total)
}

func (b *progressBar) draw() {
	done := b.finished()
	const width = 30
	filled := width * done / b.total
	fmt.Fprintf(b.w, "\r[%s%s] %3d%% %d/%d sources %s ",
		strings.Repeat("#", filled), strings.Repeat(" ", width-filled),
		100*done/b.total, done, b.total, time.Since(b.start).Round(time.Second))
}

// line writes one progress line, for a log rather than a terminal.
func (b *progressBar) line() {
	done := b.finished()
	fmt.Fprintf(b.w, "edge replay: %d/%d sources (%d%%) after %s\n",
		done, b.total, 100*done/b.total, time.Since(b.start).Round(time.Second))
}

// stop ends the goroutine and waits for it.
func (b *progressBar) stop() {
	close(b.quit)
	<-b.done
}
