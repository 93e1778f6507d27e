package guard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// appendFrame appends a frame of type typ with flags, stream and payload.
func appendFrame(b []byte, typ, flags uint8, stream uint32, payload []byte) []byte {
	n := len(payload)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

func rstFrame(b []byte, stream, code uint32) []byte {
	return appendFrame(b, frameRSTStream, 0, stream, binary.BigEndian.AppendUint32(nil, code))
}

// headersFrame is a HEADERS frame ending its block and its stream, with
// a payload of n bytes (which no HPACK decoder here reads).
func headersFrame(b []byte, stream uint32, flags uint8, n int) []byte {
	return appendFrame(b, frameHeaders, flags, stream, bytes.Repeat([]byte{0x82}, n))
}

// frameScript is a connection whose reads return in, in pieces of at most
// chunk bytes, and whose writes are kept; Close is recorded.
type frameScript struct {
	in    []byte
	chunk int
	mu    sync.Mutex
	out   bytes.Buffer
	shut  bool
}

func (c *frameScript) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shut {
		return 0, net.ErrClosed
	}
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.chunk)], c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *frameScript) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shut {
		return 0, net.ErrClosed
	}
	return c.out.Write(p)
}

func (c *frameScript) Close() error {
	c.mu.Lock()
	c.shut = true
	c.mu.Unlock()
	return nil
}

func (c *frameScript) closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shut
}

func (c *frameScript) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

func (*frameScript) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (*frameScript) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}
}
func (*frameScript) SetDeadline(time.Time) error      { return nil }
func (*frameScript) SetReadDeadline(time.Time) error  { return nil }
func (*frameScript) SetWriteDeadline(time.Time) error { return nil }

// fakeClock advances by step at every reading.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// goAwayOf returns the last frame of b if it is a GOAWAY: its last stream
// and error code.
func goAwayOf(b []byte) (stream, code uint32, ok bool) {
	if len(b) < 17 {
		return 0, 0, false
	}
	f := b[len(b)-17:]
	if f[2] != 8 || f[3] != frameGoAway {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(f[9:]), binary.BigEndian.Uint32(f[13:]), true
}

// TestWatchFramesClientFloods: each flood of the client's frames ends the
// connection at the frame that passes its limit: the server reads every
// frame before that one, and neither that one nor any after, the connection gets a GOAWAY with
// ENHANCE_YOUR_CALM naming the last stream opened, closes, and OnFlood is
// told its kind once; just under the limit, or spread over time, nothing
// happens.
func TestWatchFramesClientFloods(t *testing.T) {
	pairs := func(n int) []byte {
		var b []byte
		for i := range n {
			id := uint32(2*i + 1)
			b = headersFrame(b, id, flagEndHeaders|flagEndStream, 3)
			b = rstFrame(b, id, codeCancel)
		}
		return b
	}
	repeat := func(n int, f []byte) []byte { return bytes.Repeat(f, n) }
	ping := appendFrame(nil, framePing, 0, 0, make([]byte, 8))
	lim := FrameLimits{MaxResets: 10, MaxControlFrames: 20, MaxHeaderBytes: 1024}
	openBlock := headersFrame(nil, 1, flagEndStream, 100)
	tests := []struct {
		name     string
		in       []byte
		step     time.Duration // the clock's advance at each reading
		wantKind string        // "" for none
		// wantRead is how many bytes after the preface the server reads
		// (all of in when no flood).
		wantRead   int
		wantStream uint32
	}{
		{"resets at the limit", pairs(10), 0, "", len(pairs(10)), 0},
		{"one reset too many", pairs(11), 0, FloodRapidReset, len(pairs(11)) - 13, 21},
		{"resets spread over time", pairs(40), 200 * time.Millisecond, "", len(pairs(40)), 0},
		{"resets twice as fast as allowed", pairs(40), 50 * time.Millisecond, FloodRapidReset, -1, 0},
		{"pings at the limit", repeat(20, ping), 0, "", 20 * 17, 0},
		{"pings over", repeat(25, ping), 0, FloodControl, 20 * 17, 0},
		{"settings over", repeat(21, appendFrame(nil, frameSettings, 0, 0, nil)), 0, FloodControl, 20 * 9, 0},
		{"window updates over", repeat(21, appendFrame(nil, frameWindowUpdate, 0, 0, []byte{0, 0, 0, 1})), 0, FloodControl, 20 * 13, 0},
		{"priority over", repeat(21, appendFrame(nil, framePriority, 0, 3, make([]byte, 5))), 0, FloodControl, 20 * 14, 0},
		{"empty DATA over", append(headersFrame(nil, 1, flagEndHeaders, 3), repeat(21, appendFrame(nil, frameData, 0, 1, nil))...),
			0, FloodControl, 12 + 20*9, 1},
		{"padded empty DATA over", append(headersFrame(nil, 1, flagEndHeaders, 3), repeat(21, appendFrame(nil, frameData, flagPadded, 1, []byte{4, 0, 0, 0, 0}))...),
			0, FloodControl, 12 + 20*14, 1},
		{"empty DATA ending streams", repeat(30, append(headersFrame(nil, 1, flagEndHeaders, 3), appendFrame(nil, frameData, flagEndStream, 1, nil)...)),
			0, "", 30 * 21, 0},
		{"DATA with data", append(headersFrame(nil, 1, flagEndHeaders, 3), repeat(30, appendFrame(nil, frameData, 0, 1, []byte("x")))...),
			0, "", 12 + 30*10, 0},
		{"header block within bounds", append(openBlock, appendFrame(nil, frameContinuation, flagEndHeaders, 1, make([]byte, 2900))...),
			0, "", 109 + 2909, 0},
		{"header block too long", append(openBlock, repeat(10, appendFrame(nil, frameContinuation, 0, 1, make([]byte, 1000)))...),
			0, FloodContinuation, 109 + 2*1009, 1},
		{"header block without end", append(openBlock, repeat(1000, appendFrame(nil, frameContinuation, 0, 1, nil))...),
			0, FloodContinuation, 109 + (1024+headerBlockSlack-109)/9*9, 1},
		{"one HEADERS promising too much", headersFrame(nil, 5, 0, 4000), 0, FloodContinuation, 0, 5},
		{"one long HEADERS with its end", headersFrame(nil, 5, flagEndHeaders, 4000), 0, "", 4009, 0},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 7, 4096} {
			t.Run(fmt.Sprintf("%s/chunk %d", tt.name, chunk), func(t *testing.T) {
				sc := &frameScript{in: append([]byte(Preface), tt.in...), chunk: chunk}
				clock := &fakeClock{t: time.Unix(1e9, 0), step: tt.step}
				var floods []Flood
				l := lim
				l.Now = clock.now
				l.OnFlood = func(f Flood) { floods = append(floods, f) }
				c := WatchFrames(sc, l)
				got, err := io.ReadAll(c)
				read := len(got) - len(Preface)
				switch {
				case tt.wantKind == "":
					if err != nil || read != len(tt.in) || len(floods) != 0 || sc.closed() {
						t.Fatalf("read %d of %d bytes, err %v, floods %v, closed %v; want everything, no flood", read, len(tt.in), err, floods, sc.closed())
					}
					return
				case len(floods) != 1 || floods[0].Kind != tt.wantKind:
					t.Fatalf("floods %v, want one %s", floods, tt.wantKind)
				case floods[0].Peer.String() != "192.0.2.1:4000":
					t.Errorf("flood's peer %v, want the connection's", floods[0].Peer)
				case !errors.Is(err, net.ErrClosed) || !sc.closed():
					t.Errorf("read ended with %v, closed %v; want the connection closed", err, sc.closed())
				}
				// Of the frame that passed the limit, at most what came
				// before its header and kept bytes were complete (in
				// pieces, the reads before that): never the frame.
				if tt.wantRead >= 0 && (read < tt.wantRead || read >= tt.wantRead+frameHeaderLen+8) {
					t.Errorf("the server read %d bytes after the preface, want %d (the frame that passed the limit not whole)", read, tt.wantRead)
				}
				if !bytes.Equal(got, append([]byte(Preface), tt.in[:read]...)) {
					t.Errorf("the server read other bytes than the client's")
				}
				stream, code, ok := goAwayOf(sc.written())
				if !ok || code != codeEnhanceYourCalm || (tt.wantStream > 0 && stream != tt.wantStream) {
					t.Errorf("written %x: want a GOAWAY, ENHANCE_YOUR_CALM, last stream %d", sc.written(), tt.wantStream)
				}
			})
		}
	}
}

// TestWatchFramesServerResets: the streams the server resets count
// toward max_resets (MadeYouReset), but for the codes of its own choice
// (NO_ERROR, INTERNAL_ERROR, CANCEL); past the limit the whole frames of
// the write that passed it are sent, then a GOAWAY, and the connection
// closes. A GOAWAY of the
// server's with an error just after a CONTINUATION is a continuation flood.
func TestWatchFramesServerResets(t *testing.T) {
	tests := []struct {
		name     string
		code     uint32
		n        int
		wantKind string
	}{
		{"protocol errors", 0x1, 13, FloodRapidReset},
		{"stream closed", 0x5, 13, FloodRapidReset},
		{"refused", 0x7, 13, FloodRapidReset},
		{"within the limit", 0x1, 10, ""},
		{"no error", codeNo, 50, ""},
		{"internal", codeInternal, 50, ""},
		{"cancel", codeCancel, 50, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := &frameScript{chunk: 4096}
			var floods []string
			c := WatchFrames(sc, FrameLimits{MaxResets: 10, Now: (&fakeClock{}).now, OnFlood: func(f Flood) { floods = append(floods, f.Kind) }})
			var want []byte
			for i := range tt.n {
				want = rstFrame(want, uint32(2*i+1), tt.code)
			}
			// Written in pieces of 7 bytes, which cut the frames as a
			// buffered writer does: the piece that passes the limit
			// holds the end of the 11th frame and the start of the
			// 12th, which is never sent.
			var werr error
			for i := 0; i < len(want) && werr == nil; i += 7 {
				_, werr = c.Write(want[i:min(i+7, len(want))])
			}
			out := sc.written()
			if tt.wantKind == "" {
				if werr != nil || len(floods) != 0 || sc.closed() || !bytes.Equal(out, want) {
					t.Fatalf("floods %v, closed %v, written %d bytes of %d; want no flood", floods, sc.closed(), len(out), len(want))
				}
				return
			}
			if !slices.Equal(floods, []string{tt.wantKind}) || !sc.closed() {
				t.Fatalf("floods %v, closed %v; want one %s and the connection closed", floods, sc.closed(), tt.wantKind)
			}
			if len(out) != 11*13+17 || !bytes.Equal(out[:11*13], want[:11*13]) {
				t.Errorf("written %x: want the 11 frames, then a GOAWAY", out)
			}
			if _, code, ok := goAwayOf(out); !ok || code != codeEnhanceYourCalm {
				t.Errorf("written %x: want a GOAWAY with ENHANCE_YOUR_CALM last", out)
			}
			if werr == nil {
				t.Errorf("the writes after the end succeeded")
			}
		})
	}

	t.Run("GOAWAY after a CONTINUATION", func(t *testing.T) {
		in := headersFrame(nil, 1, 0, 10)
		in = appendFrame(in, frameContinuation, 0, 1, make([]byte, 10))
		sc := &frameScript{in: append([]byte(Preface), in...), chunk: 4096}
		var floods []string
		c := WatchFrames(sc, FrameLimits{MaxHeaderBytes: 1 << 20, OnFlood: func(f Flood) { floods = append(floods, f.Kind) }})
		if _, err := io.ReadAll(c); err != nil {
			t.Fatal(err)
		}
		goAway := appendFrame(nil, frameGoAway, 0, 0, []byte{0, 0, 0, 1, 0, 0, 0, 1}) // PROTOCOL_ERROR
		if _, err := c.Write(goAway); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(floods, []string{FloodContinuation}) {
			t.Errorf("floods %v, want one continuation", floods)
		}
		if !bytes.Equal(sc.written(), goAway) || sc.closed() {
			t.Errorf("the server's GOAWAY must pass as it is, and the server close the connection")
		}
	})
}

func TestRate(t *testing.T) {
	s := time.Second
	tests := []struct {
		name  string
		at    []time.Duration
		limit int
		want  []bool // over the limit after each event
	}{
		{"within", []time.Duration{0, 0, 0}, 3, []bool{false, false, false}},
		{"over", []time.Duration{0, 0, 0, 0}, 3, []bool{false, false, false, true}},
		{"previous second weighs", []time.Duration{0, 0, 0, s + s/4, s + s/4}, 3, []bool{false, false, false, false, true}},
		{"previous second gone", []time.Duration{0, 0, 0, 2 * s, 2 * s, 2 * s}, 3, []bool{false, false, false, false, false, false}},
		{"a gap of two periods", []time.Duration{0, 0, 0, 5 * s, 5 * s, 5 * s, 5 * s}, 3, []bool{false, false, false, false, false, false, true}},
		{"clock gone back", []time.Duration{s, s + s/2, s / 2, s / 4}, 3, []bool{false, false, false, true}},
		{"limit 1", []time.Duration{0, s / 2}, 1, []bool{false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r rate
			var got []bool
			for _, at := range tt.at {
				got = append(got, r.add(at, tt.limit))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// frameList reads the frames of b in one piece, plainly: the reference
// the scanner is checked against.
func frameList(b []byte) []string {
	var out []string
	for len(b) >= frameHeaderLen {
		n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		f := frame{length: uint32(n), typ: b[3], flags: b[4], stream: binary.BigEndian.Uint32(b[5:]) &^ (1 << 31)}
		keep := min(keepFor(&f), n)
		if len(b) < frameHeaderLen+keep {
			break
		}
		f.payload = b[frameHeaderLen : frameHeaderLen+keep]
		out = append(out, fmt.Sprintf("%d/%d/%d/%d/%x", f.length, f.typ, f.flags, f.stream, f.payload))
		if len(b) < frameHeaderLen+n {
			break
		}
		b = b[frameHeaderLen+n:]
	}
	return out
}

// FuzzWatchFrames: whatever a client sends, in whatever pieces, the
// scanner tells the frames a plain reading of the whole finds, the server
// reads a prefix of the bytes sent, all of them unless a flood ended the
// connection, and a flood is found at the same byte however the bytes
// come (but for the reads that had passed part of its frame).
func FuzzWatchFrames(f *testing.F) {
	f.Add(headersFrame(rstFrame(nil, 1, 8), 3, 0, 20), uint8(1))
	f.Add(appendFrame(headersFrame(nil, 1, 0, 100), frameContinuation, flagEndHeaders, 1, make([]byte, 50)), uint8(7))
	f.Add(appendFrame(nil, frameData, flagPadded, 1, []byte{9, 1, 2}), uint8(2))
	f.Add(bytes.Repeat(appendFrame(nil, framePing, 0, 0, make([]byte, 8)), 30), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		var told []string
		var s frameScanner
		for i := 0; i < len(in); {
			k := min(len(in)-i, int(chunk)%17+1)
			s.scan(in[i:i+k], func(f *frame) bool {
				told = append(told, fmt.Sprintf("%d/%d/%d/%d/%x", f.length, f.typ, f.flags, f.stream, f.payload))
				return true
			})
			i += k
		}
		if want := frameList(in); !slices.Equal(told, want) {
			t.Fatalf("in pieces of %d the scanner told %q, want %q", int(chunk)%17+1, told, want)
		}

		lim := FrameLimits{MaxResets: 3, MaxControlFrames: 5, MaxHeaderBytes: 64, Now: func() time.Time { return time.Unix(0, 0) }}
		read := func(chunk int) ([]byte, int) {
			sc := &frameScript{in: append([]byte(Preface), in...), chunk: chunk}
			floods := 0
			l := lim
			l.OnFlood = func(Flood) { floods++ }
			got, _ := io.ReadAll(WatchFrames(sc, l))
			return got, floods
		}
		whole, floods := read(1 << 20)
		if !bytes.HasPrefix(append([]byte(Preface), in...), whole) || floods > 1 || floods == 0 && len(whole) != len(Preface)+len(in) {
			t.Fatalf("the server read %d of %d bytes with %d floods", len(whole), len(Preface)+len(in), floods)
		}
		// In pieces, the reads before the flood's frame was known may
		// have passed the start of it, never more than its header and
		// kept bytes.
		if pieces, floods2 := read(int(chunk)%17 + 1); !bytes.HasPrefix(pieces, whole) || len(pieces)-len(whole) >= frameHeaderLen+8 || floods2 != floods {
			t.Fatalf("in pieces the server read %d bytes (%d floods), whole %d (%d)", len(pieces), floods2, len(whole), floods)
		}
	})
}
