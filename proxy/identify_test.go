package proxy

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// cipTrusted is the trusted set of the tests: two IPv4 ranges, one IPv6
// range, and an IPv4 range written as IPv4-mapped IPv6.
var cipTrusted = []string{"10.0.0.0/8", "192.168.1.0/24", "2001:db8:ffff::/48", "::ffff:172.16.0.0/108"}

func cipNew(t testing.TB, prefixes []string, ipv6Prefix int) *ClientIP {
	t.Helper()
	ps := make([]netip.Prefix, len(prefixes))
	for i, s := range prefixes {
		ps[i] = netip.MustParsePrefix(s)
	}
	c, err := NewClientIP(ps, ipv6Prefix)
	if err != nil {
		t.Fatalf("NewClientIP(%v, %d): %v", prefixes, ipv6Prefix, err)
	}
	return c
}

// cipWant builds an Identity from strings; "" is the zero Addr.
func cipWant(peer, client, key string, fromXFF, malformed bool) Identity {
	parse := func(s string) netip.Addr {
		if s == "" {
			return netip.Addr{}
		}
		return netip.MustParseAddr(s)
	}
	return Identity{Peer: parse(peer), Client: parse(client), Key: parse(key), FromXFF: fromXFF, XFFMalformed: malformed}
}

// cipList returns n comma-separated copies of elem.
func cipList(elem string, n int) string {
	return strings.TrimSuffix(strings.Repeat(elem+",", n), ",")
}

func TestClientIPResolve(t *testing.T) {
	c := cipNew(t, cipTrusted, 64)
	const (
		proxy  = "10.0.0.1:443"
		client = "203.0.113.7"
	)
	peerOnly := cipWant("10.0.0.1", "10.0.0.1", "10.0.0.1", false, false)
	peerBad := cipWant("10.0.0.1", "10.0.0.1", "10.0.0.1", false, true)
	fromXFF := cipWant("10.0.0.1", client, client, true, false)
	unix := cipWant("", "", "0.0.0.0", false, false)

	tests := []struct {
		name   string
		remote string
		xff    []string
		want   Identity
	}{
		// The peer is not trusted: X-Forwarded-For is never read.
		{"untrusted peer, spoofed xff", "198.51.100.9:5555", []string{"1.1.1.1"},
			cipWant("198.51.100.9", "198.51.100.9", "198.51.100.9", false, false)},
		{"untrusted peer, xff names a trusted proxy", "198.51.100.9:5555", []string{"1.1.1.1, 10.0.0.2"},
			cipWant("198.51.100.9", "198.51.100.9", "198.51.100.9", false, false)},
		{"untrusted peer, garbage xff is not malformed", "198.51.100.9:5555", []string{"unknown"},
			cipWant("198.51.100.9", "198.51.100.9", "198.51.100.9", false, false)},
		{"untrusted peer, huge xff", "198.51.100.9:5555", []string{strings.Repeat(",", 100000)},
			cipWant("198.51.100.9", "198.51.100.9", "198.51.100.9", false, false)},
		{"untrusted ipv6 peer keyed by /64", "[2001:db8:1:2:3:4:5:6]:5555", []string{"1.1.1.1"},
			cipWant("2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::", false, false)},
		{"bare peer address", "198.51.100.9", nil,
			cipWant("198.51.100.9", "198.51.100.9", "198.51.100.9", false, false)},
		{"zoned link-local peer", "[fe80::1%eth0]:80", []string{"1.1.1.1"},
			cipWant("fe80::1", "fe80::1", "fe80::", false, false)},

		// The peer is trusted: the walk.
		{"trusted peer, no xff", proxy, nil, peerOnly},
		{"trusted peer, empty xff line", proxy, []string{""}, peerOnly},
		{"trusted peer, only empty elements", proxy, []string{" , ,\t,"}, peerOnly},
		{"single client", proxy, []string{client}, fromXFF},
		{"prepended fake is ignored", proxy, []string{"6.6.6.6, " + client}, fromXFF},
		{"mixed chain", proxy, []string{"6.6.6.6, " + client + ", 10.1.1.1, 192.168.1.5"}, fromXFF},
		{"trusted range edge is untrusted", proxy, []string{"192.168.2.1, 192.168.1.5"},
			cipWant("10.0.0.1", "192.168.2.1", "192.168.2.1", true, false)},
		{"several lines are one list", proxy, []string{"6.6.6.6", client + ", 10.1.1.1", "192.168.1.5"}, fromXFF},
		{"client in the last line", proxy, []string{"10.1.1.1", client}, fromXFF},
		{"empty line between lines", proxy, []string{client, "", "10.1.1.1"}, fromXFF},
		{"all trusted gives left-most", proxy, []string{"10.0.0.2, 10.0.0.3, 192.168.1.9"},
			cipWant("10.0.0.1", "10.0.0.2", "10.0.0.2", true, false)},
		{"all trusted across lines, leading empties", proxy, []string{" , 10.0.0.2", "10.0.0.3"},
			cipWant("10.0.0.1", "10.0.0.2", "10.0.0.2", true, false)},
		{"garbage on the walk falls back", proxy, []string{client + ", unknown, 10.1.1.1"}, peerBad},
		{"garbage in a later line falls back", proxy, []string{client, "10.1.1.1, _hidden"}, peerBad},
		{"garbage left of the client is ignored", proxy, []string{"unknown, 1.2.3.4:80, " + client}, fromXFF},
		{"garbage line left of the client is ignored", proxy, []string{"unknown", client}, fromXFF},

		// Empty elements (RFC 9110 §5.6.1).
		{"empty element between untrusted", proxy, []string{"1.2.3.4,,5.6.7.8"},
			cipWant("10.0.0.1", "5.6.7.8", "5.6.7.8", true, false)},
		{"empty element before trusted", proxy, []string{client + ",,10.1.1.1"}, fromXFF},
		{"trailing comma", proxy, []string{client + ","}, fromXFF},
		{"leading comma", proxy, []string{"," + client}, fromXFF},

		// Whitespace.
		{"spaces around", proxy, []string{"  " + client + "  "}, fromXFF},
		{"tabs around", proxy, []string{"\t" + client + "\t"}, fromXFF},
		{"space before comma", proxy, []string{client + " ,10.1.1.1"}, fromXFF},
		{"no space after comma", proxy, []string{"6.6.6.6," + client + ",10.1.1.1"}, fromXFF},
		{"mixed OWS", proxy, []string{" \t6.6.6.6 ,\t " + client + "\t, 10.1.1.1 "}, fromXFF},
		{"space inside an element", proxy, []string{"203.0.113 .7"}, peerBad},
		{"vertical tab is not OWS", proxy, []string{client + "\v"}, peerBad},
		{"no-break space is not OWS", proxy, []string{client + "\u00a0"}, peerBad},

		// Accepted address forms.
		{"bracketed ipv6 without port", proxy, []string{"[2001:db8:1:2::99]"},
			cipWant("10.0.0.1", "2001:db8:1:2::99", "2001:db8:1:2::", true, false)},
		{"upper-case ipv6", proxy, []string{"2001:DB8:1:2::99"},
			cipWant("10.0.0.1", "2001:db8:1:2::99", "2001:db8:1:2::", true, false)},
		{"non-canonical ipv6 zero run", proxy, []string{"2001:db8:1:2:0:0:0:99"},
			cipWant("10.0.0.1", "2001:db8:1:2::99", "2001:db8:1:2::", true, false)},

		// IPv4-mapped IPv6 counts as IPv4 everywhere.
		{"mapped peer is trusted as ipv4", "[::ffff:10.0.0.1]:443", []string{client}, fromXFF},
		{"mapped untrusted peer keyed as ipv4", "[::ffff:198.51.100.9]:443", []string{"1.1.1.1"},
			cipWant("198.51.100.9", "198.51.100.9", "198.51.100.9", false, false)},
		{"mapped trusted xff entry is skipped", proxy, []string{client + ", ::ffff:10.1.1.1"}, fromXFF},
		{"mapped client in xff", proxy, []string{"::ffff:" + client}, fromXFF},
		{"bracketed mapped client in xff", proxy, []string{"[::ffff:" + client + "]"}, fromXFF},
		{"peer trusted by a mapped config prefix", "172.16.5.5:443", []string{client},
			cipWant("172.16.5.5", client, client, true, false)},
		{"ipv6 trusted peer, ipv6 client", "[2001:db8:ffff::1]:443", []string{"2001:db8:1:2:3:4:5:6"},
			cipWant("2001:db8:ffff::1", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::", true, false)},
		{"ipv6 trusted xff hop is skipped", proxy, []string{client + ", 2001:db8:ffff::7"}, fromXFF},

		// Limits: more than 8 KiB, more than 64 elements.
		{"8 KiB header", proxy, []string{strings.Repeat(" ", 8192-len(client)) + client}, fromXFF},
		{"8 KiB + 1 header", proxy, []string{strings.Repeat(" ", 8193-len(client)) + client}, peerBad},
		{"8 KiB across lines, separator counted", proxy,
			[]string{strings.Repeat(" ", 4096), strings.Repeat(" ", 4095-len(client)) + client}, fromXFF},
		{"8 KiB + 1 across lines", proxy,
			[]string{strings.Repeat(" ", 4096), strings.Repeat(" ", 4096-len(client)) + client}, peerBad},
		{"8 KiB of commas", proxy, []string{strings.Repeat(",", 8193)}, peerBad},
		{"many empty lines", proxy, make([]string, 10000), peerBad},
		{"client is the 64th element", proxy, []string{client + "," + cipList("10.1.1.1", 63)}, fromXFF},
		{"client is the 65th element", proxy, []string{client + "," + cipList("10.1.1.1", 64)}, peerBad},
		{"64 trusted elements", proxy, []string{cipList("10.1.1.1", 64)},
			cipWant("10.0.0.1", "10.1.1.1", "10.1.1.1", true, false)},
		{"65 trusted elements", proxy, []string{cipList("10.1.1.1", 65)}, peerBad},
		{"empty elements count towards the limit", proxy, []string{client + strings.Repeat(",", 63)}, fromXFF},
		{"65 elements with empties", proxy, []string{client + strings.Repeat(",", 64)}, peerBad},
		{"long list left of the client is ignored", proxy, []string{cipList("6.6.6.6", 500) + "," + client}, fromXFF},

		// remoteAddr that is not an IP address: one shared key, xff ignored.
		{"empty remote", "", []string{client}, unix},
		{"unix socket remote", "@", []string{client}, unix},
		{"unix path remote", "/run/edge.sock", nil, unix},
		{"host name remote", "localhost:80", nil, unix},
		{"port out of range", "10.0.0.1:65536", []string{client}, unix},
		{"bracketed ipv4 remote", "[10.0.0.1]:80", []string{client}, unix},
		{"unbracketed ipv6 with port is one address", "2001:db8::1:80", nil,
			cipWant("2001:db8::1:80", "2001:db8::1:80", "2001:db8::", false, false)},
		{"bracketed ipv6 without port remote", "[2001:db8::1]", nil, unix},
		{"empty zone remote", "[fe80::1%]:80", nil, unix},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Resolve(tt.remote, tt.xff); got != tt.want {
				t.Errorf("Resolve(%q, %.60q)\n got %+v\nwant %+v", tt.remote, tt.xff, got, tt.want)
			}
		})
	}
}

// TestClientIPMalformed checks each element form that must stop the walk,
// placed where the walk meets it, and that the same element left of the
// client is harmless.
func TestClientIPMalformed(t *testing.T) {
	c := cipNew(t, cipTrusted, 64)
	peer := cipWant("10.0.0.1", "10.0.0.1", "10.0.0.1", false, true)
	client := cipWant("10.0.0.1", "203.0.113.7", "203.0.113.7", true, false)
	tests := []struct {
		name, elem string
	}{
		{"word", "unknown"},
		{"underscore", "_hidden"},
		{"ipv4 with port", "1.2.3.4:80"},
		{"ipv6 with port", "[2001:db8::1]:80"},
		{"bracketed ipv4", "[1.2.3.4]"},
		{"unclosed bracket", "[2001:db8::1"},
		{"empty brackets", "[]"},
		{"leading zero octet", "010.0.0.1"},
		{"three octets", "1.2.3"},
		{"hex octet", "0x7f.1"},
		{"decimal integer", "2130706433"},
		{"octet over 255", "1.2.3.256"},
		{"percent-encoded nul", "%00"},
		{"nul byte", "1.2.3.4\x00"},
		{"zone", "fe80::1%eth0"},
		{"bracketed zone", "[fe80::1%eth0]"},
		{"empty zone", "fe80::1%"},
		{"ipv4 zone", "1.2.3.4%eth0"},
		{"unspecified ipv4", "0.0.0.0"},
		{"unspecified ipv6", "::"},
		{"unspecified mapped", "::ffff:0.0.0.0"},
		{"cidr", "1.2.3.0/24"},
		{"two addresses with space", "1.2.3.4 5.6.7.8"},
		{"quoted", `"1.2.3.4"`},
		{"forwarded syntax", "for=1.2.3.4"},
		{"obfuscated ipv6", "::ffff:1.2.3.4.5"},
		{"too many ipv6 groups", "1:2:3:4:5:6:7:8:9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			xff := []string{"203.0.113.7, " + tt.elem + ", 10.1.1.1"}
			if got := c.Resolve("10.0.0.1:443", xff); got != peer {
				t.Errorf("on the walk: Resolve(%q) = %+v, want %+v", xff, got, peer)
			}
			xff = []string{tt.elem + ", 203.0.113.7, 10.1.1.1"}
			if got := c.Resolve("10.0.0.1:443", xff); got != client {
				t.Errorf("left of the client: Resolve(%q) = %+v, want %+v", xff, got, client)
			}
		})
	}
}

func TestClientIPKeyMasking(t *testing.T) {
	tests := []struct {
		name       string
		ipv6Prefix int
		client     string
		wantKey    string
	}{
		{"ipv6 /32", 32, "2001:db8:1:2:3:4:5:6", "2001:db8::"},
		{"ipv6 /48", 48, "2001:db8:1:2:3:4:5:6", "2001:db8:1::"},
		{"ipv6 /56", 56, "2001:db8:1:2ff:3:4:5:6", "2001:db8:1:200::"},
		{"ipv6 /64", 64, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"},
		{"ipv6 /128", 128, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6"},
		{"ipv4 ignores the prefix", 48, "198.51.100.9", "198.51.100.9"},
		{"mapped keyed as 4-byte ipv4", 48, "::ffff:198.51.100.9", "198.51.100.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cipNew(t, cipTrusted, tt.ipv6Prefix)
			id := c.Resolve("10.0.0.1:443", []string{tt.client})
			want := netip.MustParseAddr(tt.wantKey)
			if id.Key != want {
				t.Errorf("Key = %v, want %v", id.Key, want)
			}
			if got, want := id.Client, netip.MustParseAddr(tt.client).Unmap(); got != want {
				t.Errorf("Client = %v, want %v (the full address)", got, want)
			}
			// The same client connecting directly gets the same key.
			remote := netip.AddrPortFrom(netip.MustParseAddr(tt.client), 1234).String()
			if direct := c.Resolve(remote, nil); direct.Key != want {
				t.Errorf("direct from %s: Key = %v, want %v", remote, direct.Key, want)
			}
		})
	}
}

// TestClientIPRotationInOnePrefix is hostile input 7: many addresses in one
// /64 share one key.
func TestClientIPRotationInOnePrefix(t *testing.T) {
	c := cipNew(t, nil, 64)
	base := netip.MustParseAddr("2001:db8:1:2::").As16()
	keys := make(map[netip.Addr]int)
	for i := range 10000 {
		a := base
		a[12], a[13], a[14], a[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		a[8] = byte(i * 7)
		remote := netip.AddrPortFrom(netip.AddrFrom16(a), 443).String()
		keys[c.Resolve(remote, nil).Key]++
	}
	if got, want := len(keys), 1; got != want {
		t.Errorf("distinct keys = %d, want %d", got, want)
	}
}

func TestNewClientIP(t *testing.T) {
	mapped := netip.MustParsePrefix("::ffff:10.0.0.0/80")
	tests := []struct {
		name       string
		trusted    []netip.Prefix
		ipv6Prefix int
		wantErr    []string // substrings of the error; nil means no error
	}{
		{"no trusted, /64", nil, 64, nil},
		{"lowest prefix", nil, 32, nil},
		{"highest prefix", nil, 128, nil},
		{"prefix 31", nil, 31, []string{"ipv6 prefix: must be between 32 and 128, got 31"}},
		{"prefix 129", nil, 129, []string{"got 129"}},
		{"prefix 0", nil, 0, []string{"got 0"}},
		{"prefix -1", nil, -1, []string{"got -1"}},
		{"zero prefix", []netip.Prefix{{}}, 64, []string{"trusted[0]: not a valid prefix"}},
		{"short mapped prefix", []netip.Prefix{mapped}, 64, []string{"trusted[0]: IPv4-mapped prefix must be at least /96, got ::ffff:10.0.0.0/80"}},
		{"all errors at once", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}, mapped}, 7,
			[]string{"got 7", "trusted[1]:", "trusted[2]:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClientIP(tt.trusted, tt.ipv6Prefix)
			if tt.wantErr == nil {
				if err != nil || c == nil {
					t.Fatalf("NewClientIP(%v, %d) = %v, %v; want a ClientIP", tt.trusted, tt.ipv6Prefix, c, err)
				}
				return
			}
			if err == nil || c != nil {
				t.Fatalf("NewClientIP(%v, %d) = %v, %v; want an error", tt.trusted, tt.ipv6Prefix, c, err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestClientIPTrusted(t *testing.T) {
	c := cipNew(t, []string{"10.0.0.0/8", "2001:db8:ffff::/48", "::ffff:172.16.0.0/108", "192.168.1.77/24", "::/0"}, 64)
	tests := []struct {
		name string
		addr netip.Addr
		want bool
	}{
		{"ipv4 inside", netip.MustParseAddr("10.200.0.1"), true},
		{"ipv4 outside", netip.MustParseAddr("11.0.0.1"), false},
		{"mapped inside", netip.MustParseAddr("::ffff:10.200.0.1"), true},
		{"mapped config prefix", netip.MustParseAddr("172.31.255.255"), true},
		{"mapped config prefix, outside", netip.MustParseAddr("172.32.0.0"), false},
		{"unmasked config prefix", netip.MustParseAddr("192.168.1.1"), true},
		{"ipv6 inside", netip.MustParseAddr("2001:db8:ffff:1::1"), true},
		{"ipv6 inside ::/0", netip.MustParseAddr("2001:db9::1"), true},
		{"zoned ipv6 inside", netip.MustParseAddr("2001:db8:ffff::1%eth0"), true},
		{"::/0 does not cover ipv4", netip.MustParseAddr("198.51.100.9"), false},
		{"::/0 does not cover mapped ipv4", netip.MustParseAddr("::ffff:198.51.100.9"), false},
		{"zero addr", netip.Addr{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Trusted(tt.addr); got != tt.want {
				t.Errorf("Trusted(%v) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

func TestClientIPZeroValue(t *testing.T) {
	var c ClientIP
	got := c.Resolve("[2001:db8:1:2:3:4:5:6]:443", []string{"1.1.1.1"})
	want := cipWant("2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6", false, false)
	if got != want {
		t.Errorf("zero ClientIP: Resolve = %+v, want %+v", got, want)
	}
}

func TestClientIPCopiesTrusted(t *testing.T) {
	ps := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	c, err := NewClientIP(ps, 64)
	if err != nil {
		t.Fatal(err)
	}
	ps[0] = netip.MustParsePrefix("198.51.100.0/24")
	if got := c.Trusted(netip.MustParseAddr("198.51.100.9")); got {
		t.Errorf("after the caller's slice changed: Trusted(198.51.100.9) = %v, want false", got)
	}
}

func TestClientIPConcurrent(t *testing.T) {
	c := cipNew(t, cipTrusted, 64)
	want := c.Resolve("10.0.0.1:443", []string{"6.6.6.6, 203.0.113.7, 10.1.1.1"})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if got := c.Resolve("10.0.0.1:443", []string{"6.6.6.6, 203.0.113.7, 10.1.1.1"}); got != want {
					t.Errorf("concurrent Resolve = %+v, want %+v", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestClientIPAllocs holds Resolve to zero allocations on the paths every
// request takes, including an unparseable peer and garbage XFF.
func TestClientIPAllocs(t *testing.T) {
	c := cipNew(t, cipTrusted, 64)
	tests := []struct {
		name, remote string
		xff          []string
	}{
		{"untrusted peer", "198.51.100.9:5555", []string{"6.6.6.6, 7.7.7.7"}},
		{"trusted peer, 3 entries", "10.0.0.1:5555", []string{"203.0.113.7, 10.1.1.1, 192.168.1.5"}},
		{"trusted peer, 3 lines", "10.0.0.1:5555", []string{"203.0.113.7", "10.1.1.1", "192.168.1.5"}},
		{"ipv6", "[2001:db8:ffff::1]:5555", []string{"2001:db8:1:2::9, 2001:db8:ffff::2"}},
		{"zoned peer", "[fe80::1%eth0]:5555", nil},
		{"unix socket", "@", nil},
		{"word in xff", "10.0.0.1:5555", []string{"unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(100, func() { c.Resolve(tt.remote, tt.xff) }); got != 0 {
				t.Errorf("allocs per Resolve = %v, want 0", got)
			}
		})
	}
}

// cipRefResolve is a second, simple implementation of the Resolve rules,
// built on the standard parsers, for FuzzClientIP to compare against.
func cipRefResolve(c *ClientIP, remote string, lines []string) Identity {
	var peer netip.Addr
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		peer = ap.Addr()
	} else if a, err := netip.ParseAddr(remote); err == nil {
		peer = a
	} else {
		return Identity{Key: netip.IPv4Unspecified()}
	}
	peer = peer.WithZone("").Unmap()
	id := Identity{Peer: peer, Client: peer}
	if c.Trusted(peer) && len(lines) > 0 {
		joined := strings.Join(lines, ",")
		elems := strings.Split(joined, ",")
		var leftmost netip.Addr
		found := false
		switch {
		case len(joined) > xffMaxBytes:
			id.XFFMalformed = true
		default:
			for i := len(elems) - 1; i >= 0; i-- {
				if len(elems)-i > xffMaxElements {
					id.XFFMalformed = true
					break
				}
				e := strings.Trim(elems[i], " \t")
				if e == "" {
					continue
				}
				bracketed := len(e) >= 2 && e[0] == '[' && e[len(e)-1] == ']'
				if bracketed {
					e = e[1 : len(e)-1]
				}
				a, err := netip.ParseAddr(e)
				if err != nil || a.Zone() != "" || (bracketed && !a.Is6()) || a.Unmap().IsUnspecified() {
					id.XFFMalformed = true
					break
				}
				a = a.Unmap()
				leftmost = a
				if !c.Trusted(a) {
					found = true
					break
				}
			}
		}
		if !id.XFFMalformed && (found || leftmost.IsValid()) {
			id.Client, id.FromXFF = leftmost, true
		}
	}
	id.Key = id.Client
	if id.Client.Is6() {
		id.Key = netip.PrefixFrom(id.Client, c.ipv6Prefix).Masked().Addr()
	}
	return id
}

func FuzzClientIP(f *testing.F) {
	for _, s := range []struct{ remote, xff string }{
		{"198.51.100.9:5555", "1.1.1.1"},
		{"10.0.0.1:443", "6.6.6.6, 203.0.113.7, 10.1.1.1"},
		{"10.0.0.1:443", "203.0.113.7\n10.1.1.1, 192.168.1.5"},
		{"10.0.0.1:443", "10.0.0.2, 10.0.0.3"},
		{"10.0.0.1:443", "203.0.113.7, unknown, 10.1.1.1"},
		{"10.0.0.1:443", "1.2.3.4,,5.6.7.8"},
		{"10.0.0.1:443", " \t203.0.113.7\t , [2001:db8::1] ,::ffff:10.0.0.9"},
		{"10.0.0.1:443", "1.2.3.4:80, [::1]:80, 010.0.0.1, 1.2.3, 0x7f.1, %00, _hidden"},
		{"10.0.0.1:443", "fe80::1%eth0, 0.0.0.0, ::"},
		{"[::ffff:10.0.0.1]:443", "::ffff:203.0.113.7"},
		{"[2001:db8:ffff::1]:443", "2001:db8:1:2:3:4:5:6"},
		{"[fe80::1%eth0]:80", "1.1.1.1"},
		{"127.0.0.1:80", strings.Repeat(",", 70) + "1.1.1.1"},
		{"@", "1.1.1.1"},
		{"", ""},
		{"10.0.0.1", "\n\n"},
		{"2001:db8::1:80", ""},
		{"[1.2.3.4]:80", ""},
	} {
		f.Add(s.remote, s.xff, uint8(32))
	}
	trusted := []string{"10.0.0.0/8", "192.168.0.0/16", "127.0.0.1/32", "2001:db8:ffff::/48", "fe80::/10", "::1/128", "::ffff:172.16.0.0/108"}
	cs := make(map[int]*ClientIP)
	for bits := 32; bits <= 128; bits++ {
		cs[bits] = cipNew(f, trusted, bits)
	}
	none := cipNew(f, nil, 64)

	f.Fuzz(func(t *testing.T, remote, xff string, bits uint8) {
		c := cs[32+int(bits)%97]
		var lines []string
		if xff != "" {
			lines = strings.Split(xff, "\n")
		}
		got := c.Resolve(remote, lines)

		if want := cipRefResolve(c, remote, lines); got != want {
			t.Fatalf("Resolve(%q, %q)\n got %+v\nwant %+v (reference)", remote, lines, got, want)
		}
		if !got.Key.IsValid() {
			t.Fatalf("Resolve(%q, %q).Key is not valid", remote, lines)
		}
		if !got.Client.IsValid() {
			if got.Key != netip.IPv4Unspecified() {
				t.Fatalf("no client: Key = %v, want 0.0.0.0", got.Key)
			}
		} else {
			want := got.Client
			if want.Is6() {
				want = netip.PrefixFrom(want, c.ipv6Prefix).Masked().Addr()
			}
			if got.Key != want {
				t.Fatalf("Key = %v, want Client %v masked = %v", got.Key, got.Client, want)
			}
			if got.Client.Is4In6() || got.Client.Zone() != "" || got.Peer.Is4In6() || got.Peer.Zone() != "" {
				t.Fatalf("not normalised: %+v", got)
			}
		}
		if !c.Trusted(got.Peer) {
			if got.Client != got.Peer || got.FromXFF || got.XFFMalformed {
				t.Fatalf("untrusted peer: Resolve(%q, %q) = %+v, want Client == Peer", remote, lines, got)
			}
			if direct := c.Resolve(remote, nil); direct != got {
				t.Fatalf("untrusted peer: with xff %+v, without %+v", got, direct)
			}
		}
		if direct := none.Resolve(remote, lines); direct.Client != direct.Peer || direct.FromXFF {
			t.Fatalf("no trusted prefixes: Resolve(%q, %q) = %+v, want Client == Peer", remote, lines, direct)
		}
		if joined := c.Resolve(remote, []string{strings.Join(lines, ",")}); len(lines) > 0 && joined != got {
			t.Fatalf("lines %q resolve to %+v, joined to %+v", lines, got, joined)
		}
	})
}

func BenchmarkClientIP(b *testing.B) {
	c := cipNew(b, cipTrusted, 64)
	benchmarks := []struct {
		name, remote string
		xff          []string
	}{
		{"untrusted_peer", "198.51.100.9:5555", []string{"6.6.6.6, 7.7.7.7"}},
		{"trusted_peer_xff_3_entries", "10.0.0.1:5555", []string{"203.0.113.7, 10.1.1.1, 192.168.1.5"}},
		{"trusted_peer_xff_3_lines", "10.0.0.1:5555", []string{"203.0.113.7", "10.1.1.1", "192.168.1.5"}},
		{"trusted_peer_ipv6_xff_3_entries", "[2001:db8:ffff::1]:5555", []string{"2001:db8:1:2::9, 2001:db8:ffff::2, 2001:db8:ffff::3"}},
		{"trusted_peer_xff_64_trusted", "10.0.0.1:5555", []string{cipList("10.1.1.1", 64)}},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Resolve(bm.remote, bm.xff)
			}
		})
	}
}
