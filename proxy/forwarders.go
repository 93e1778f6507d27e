package proxy

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// A peer that edge does not trust and that sends many X-Forwarded-For
// values is a proxy, not a client: every client behind it shares its key
// (ClientIP reads X-Forwarded-For only from client_ip.trusted_proxies).
// identify notices such peers so that the log says which setting to
// change, instead of the operator finding out from one key refusing
// everyone.
const (
	// forwarderValues distinct X-Forwarded-For values from one peer within
	// forwarderWindow make it a forwarder.
	forwarderValues = 10
	forwarderWindow = time.Minute
	// forwarderEvery is how often one forwarder is counted and logged again
	// while it goes on.
	forwarderEvery = time.Hour
	// forwarderPeers bounds the peers remembered, least recently seen
	// forgotten first: about 150 bytes each.
	forwarderPeers = 1024
)

// noteForwarder feeds the forwarder detection with a request whose peer
// and client are id and whose X-Forwarded-For lines are xff, at now. It
// costs one length check for a request without X-Forwarded-For, the
// common case, and allocates only for a peer it has not seen recently.
func (p *Proxy) noteForwarder(st *state, id Identity, xff []string, now time.Time) {
	if len(xff) == 0 || !id.Peer.IsValid() || st.clientIP.Trusted(id.Peer) {
		return
	}
	if !p.forwarders.observe(id.Peer, xff, now) {
		return
	}
	p.metrics.untrustedForwarders.Inc()
	suppressed, ok := p.forwarderLog.allow(now)
	if !ok {
		return
	}
	p.log.Warn("a peer edge does not trust sends X-Forwarded-For for many clients, who all share its key: add it to client_ip.trusted_proxies if it is your proxy",
		"peer", id.Peer.String(), "setting", "client_ip.trusted_proxies",
		"distinct_values", forwarderValues, "within", forwarderWindow.String(), "suppressed", suppressed)
}

// forwarders remembers, for at most forwarderPeers untrusted peers that
// sent X-Forwarded-For, the distinct values each sent in its current
// minute, as hashes. A minute starts at the first value after the last
// one ended; values are told apart by a seeded 64-bit hash, so two
// colliding values (about 2^-64 a pair) count as one and a peer is noticed
// a value later. It is safe for concurrent use; the zero value is ready.
//
// One lock serves all peers: only requests with X-Forwarded-For from an
// untrusted peer take it, and they hold it for a lookup and at most ten
// comparisons.
type forwarders struct {
	mu    sync.Mutex
	seed  maphash.Seed
	peers *simplelru.LRU[netip.Addr, *forwarder]
	spare *forwarder // the last one forgotten, for the next new peer
}

// forwarder is one peer's record. Times are Unix nanoseconds, so that the
// entry holds no pointer.
type forwarder struct {
	start   int64 // when the current minute began
	n       int   // distinct values so far in it
	values  [forwarderValues]uint64
	noticed int64 // when last counted as a forwarder; 0 for never
}

// observe records that peer sent the X-Forwarded-For lines xff at now and
// reports whether the peer is now to be counted as a forwarder: it has
// sent forwarderValues distinct values within its minute and was not
// counted in the last forwarderEvery. A clock that goes back starts a new
// minute and counts no peer again before an hour after it was counted.
func (f *forwarders) observe(peer netip.Addr, xff []string, now time.Time) bool {
	var h maphash.Hash
	t := now.UnixNano()

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers == nil {
		f.seed = maphash.MakeSeed()
		// NewLRU fails only for a size below 1.
		f.peers, _ = simplelru.NewLRU(forwarderPeers, func(_ netip.Addr, e *forwarder) { f.spare = e })
	}
	h.SetSeed(f.seed)
	for _, line := range xff {
		h.WriteString(line)
		h.WriteByte(0) // no header value holds a NUL, so lines cannot run into each other
	}
	v := h.Sum64()

	e, ok := f.peers.Get(peer)
	if !ok {
		e, f.spare = f.spare, nil
		if e == nil {
			e = new(forwarder)
		}
		*e = forwarder{start: t}
		f.peers.Add(peer, e) // may forget the oldest peer into f.spare
	}
	if t < e.start || t-e.start >= int64(forwarderWindow) {
		e.start, e.n = t, 0
	}
	if e.n < forwarderValues {
		for _, seen := range e.values[:e.n] {
			if seen == v {
				return false
			}
		}
		e.values[e.n] = v
		e.n++
		if e.n < forwarderValues {
			return false
		}
	}
	if e.noticed != 0 && (t < e.noticed || t-e.noticed < int64(forwarderEvery)) {
		return false
	}
	e.noticed = t
	return true
}

// len returns how many peers f remembers.
func (f *forwarders) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers == nil {
		return 0
	}
	return f.peers.Len()
}
