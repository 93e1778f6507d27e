package origin

import (
	"context"
	"errors"
	"hash/fnv"
	"math"
	"math/bits"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// An upstream group: several servers behind one domain, the choice of one
// for each try of a request (Balance), the servers taken out by the
// failures of real requests (passive ejection) and by active checks
// (checks.go), and the retries of a failed request on another server
// under a budget. Both request paths go through it: the net/http path's
// transport and the fast forward each run a Trip per request. How it behaves, and why: docs/origins.md.

// Balance is how an Upstream chooses among its servers.
type Balance uint8

// The balancing policies.
const (
	// RoundRobin is smooth weighted round robin (nginx's): over a cycle
	// of the weights' sum each server is chosen its weight's times,
	// spread out rather than in runs.
	RoundRobin Balance = iota
	// LeastRequests chooses the server with the fewest requests in
	// flight for its weight.
	LeastRequests
	// RandomTwo chooses the less loaded of two servers picked at random
	// (the power of two choices).
	RandomTwo
	// Hash chooses by rendezvous hashing of the request's key: removing
	// one of N servers moves only the keys it had, about 1/N of them,
	// and a retry goes to the key's next server.
	Hash
)

// Failure is how a try of a request failed; 0 is none.
type Failure uint8

// The failures an Upstream counts, as sets of bits.
const (
	FailConnect Failure = 1 << iota // the connection could not be made: nothing was sent
	FailTimeout                     // no response head in time
	FailReset                       // the connection broke before a response head
	Fail502
	Fail503
	Fail504
)

// Classify returns the failure of a round trip that returned err (not
// nil): a failed dial is FailConnect, a timeout FailTimeout, anything
// else FailReset.
func Classify(err error) Failure {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return FailConnect
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return FailTimeout
	}
	return FailReset
}

// StatusFailure returns the failure a response status is (502, 503, 504),
// or 0.
func StatusFailure(status int) Failure {
	switch status {
	case http.StatusBadGateway:
		return Fail502
	case http.StatusServiceUnavailable:
		return Fail503
	case http.StatusGatewayTimeout:
		return Fail504
	}
	return 0
}

// PassiveOptions are an Upstream's passive ejection: MaxFails failures
// among On within FailWindow eject a server for EjectFor.
type PassiveOptions struct {
	MaxFails   int
	FailWindow time.Duration
	EjectFor   time.Duration
	On         Failure
}

// RetryOptions say when a failed try is followed by one on another
// server: up to Attempts more, for a failure among On, within Budget
// (a share of the group's requests over the last 10 s; 3 retries a
// second are always allowed).
type RetryOptions struct {
	Attempts int
	On       Failure
	Budget   float64
}

// ServerOptions are one server of an Upstream.
type ServerOptions struct {
	URL *url.URL
	// Name names the server in metrics and the admin API (its URL as
	// configured, redacted).
	Name   string
	Weight int // at least 1
	// MaxInFlight bounds the server's requests in flight (0: no bound):
	// a server at its bound is not chosen (limit.go).
	MaxInFlight int
	// Transport carries the net/http path's requests to the server (nil:
	// none; the caller uses its own).
	Transport http.RoundTripper
}

// UpstreamOptions make an Upstream. Zero values: round robin, no passive
// ejection, no retries.
type UpstreamOptions struct {
	Servers []ServerOptions // at least one, names unique
	Balance Balance
	Passive *PassiveOptions // nil: off
	Retries RetryOptions
	// Queue is where a request waits when every server that could take it
	// is at its MaxInFlight (nil: it is refused at once, ErrBusy). The
	// groups of one domain may share one.
	Queue *Queue
	// Previous is the group a reload replaces: servers of the same name
	// keep their state (health, ejection, counts).
	Previous *Upstream
	// Drains are the servers taken out of rotation, by name, shared by
	// the groups of a domain (drain.go); nil: none.
	Drains *Drains
	// OnEject, OnPanic and OnResponse, when not nil, are told of an
	// ejection (reason "passive" or "active"), of a choice made in panic
	// mode, and of each try's response (status 0: failed) and time.
	OnEject    func(s *Server, reason string)
	OnPanic    func()
	OnResponse func(s *Server, status int, took time.Duration)
}

// Upstream is a group of servers and its live state. Its methods are
// safe for concurrent use.
type Upstream struct {
	servers []*Server
	balance Balance
	passive *PassiveOptions
	retries RetryOptions
	hooks   UpstreamOptions // the On* hooks
	drains  *Drains
	// drainCache caches which servers drains takes out, for the set it
	// was made from (drainedMask).
	drainCache atomic.Pointer[drainMask]
	// limited says some server has a MaxInFlight; queue is where its
	// requests wait (nil: none waits).
	limited bool
	queue   *Queue

	mu      sync.Mutex // the round robin's weights and the budget's counts
	budget  budget
	retried [retryOutcomes]atomic.Uint64
	panics  atomic.Uint64
}

// NewUpstream returns the group o describes.
func NewUpstream(o UpstreamOptions) (*Upstream, error) {
	if len(o.Servers) == 0 || len(o.Servers) > 64 {
		return nil, errors.New("origin: an upstream needs 1 to 64 servers")
	}
	u := &Upstream{balance: o.Balance, passive: o.Passive, retries: o.Retries, hooks: o, drains: o.Drains}
	if o.Queue != nil && o.Queue.opts.Timeout > 0 {
		u.queue = o.Queue
	}
	u.hooks.Servers, u.hooks.Previous, u.hooks.Drains = nil, nil, nil
	names := make(map[string]bool)
	for _, so := range o.Servers {
		if so.URL == nil || so.Weight < 1 || so.MaxInFlight < 0 || names[so.Name] {
			return nil, errors.New("origin: a server needs a URL, a weight of at least 1, a MaxInFlight of at least 0 and a name of its own")
		}
		names[so.Name] = true
		u.limited = u.limited || so.MaxInFlight > 0
		s := &Server{Name: so.Name, URL: so.URL, Weight: so.Weight, MaxInFlight: int64(so.MaxInFlight), transport: so.Transport,
			addr: hostPort(so.URL), key: fnvString(so.Name)}
		if prev := o.Previous.Server(so.Name); prev != nil {
			s.st = prev.st // a server that stays keeps its state
		} else {
			s.st = new(serverState)
		}
		u.servers = append(u.servers, s)
	}
	return u, nil
}

// Server returns u's server named name, or nil (u may be nil).
func (u *Upstream) Server(name string) *Server {
	if u == nil {
		return nil
	}
	for _, s := range u.servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Servers are the group's servers, in config order.
func (u *Upstream) Servers() []*Server { return u.servers }

// Retries returns the group's retries by outcome.
func (u *Upstream) RetryCounts() map[string]uint64 {
	m := make(map[string]uint64, retryOutcomes)
	for i, n := range retryOutcomeNames {
		m[n] = u.retried[i].Load()
	}
	return m
}

// Panics is how many choices were made in panic mode.
func (u *Upstream) Panics() uint64 { return u.panics.Load() }

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func fnvString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Server is one server of an Upstream, with its live state: what it is
// doing (in flight, responses), and whether it is taken out.
type Server struct {
	Name   string
	URL    *url.URL
	Weight int
	// MaxInFlight bounds the server's requests in flight; 0: no bound.
	MaxInFlight int64
	addr        string // host:port
	key         uint64 // the hash of Name, for Hash
	transport   http.RoundTripper

	// current is the smooth round robin's current weight (changed under
	// the group's lock).
	current atomic.Int64
	st      *serverState // shared with the server of the same name a reload replaced
}

// serverState is what a server's Server in each configuration shares: a
// reload keeps it for a server that stays.
type serverState struct {
	inFlight  atomic.Int64
	responses [classes]atomic.Uint64
	ejections [2]atomic.Uint64 // passive, active
	// ejectedUntil is when a passive ejection ends (unix nanoseconds; 0:
	// none); down says the active checks took the server out.
	ejectedUntil atomic.Int64
	down         atomic.Bool

	mu          sync.Mutex
	fails       int       // failures counted since failsSince
	failsSince  time.Time // the start of the failure window
	passes      int       // active checks passed in a row
	failed      int       // active checks failed in a row
	lastCheck   time.Time
	lastOutcome string // "" before any check
}

// classes: 1xx to 5xx, and errors.
const classes = 6

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Transport is the server's transport (ServerOptions.Transport).
func (s *Server) Transport() http.RoundTripper { return s.transport }

// InFlight is how many requests the server has now.
func (s *Server) InFlight() int64 { return s.st.inFlight.Load() }

// Responses returns the server's tries by class: index 0 to 4 for 1xx to
// 5xx, 5 for tries that failed without a response.
func (s *Server) Responses() [classes]uint64 {
	var out [classes]uint64
	for i := range out {
		out[i] = s.st.responses[i].Load()
	}
	return out
}

// Ejections returns how many times passive and active checks took the
// server out.
func (s *Server) Ejections() (passive, active uint64) {
	return s.st.ejections[0].Load(), s.st.ejections[1].Load()
}

// Healthy reports whether the server takes requests at now: the active
// checks have not taken it out and no passive ejection lasts.
func (s *Server) Healthy(now time.Time) bool {
	return !s.st.down.Load() && s.st.ejectedUntil.Load() <= now.UnixNano()
}

// ejected reports whether a passive ejection lasts at now.
func (s *Server) ejected(now time.Time) bool { return s.st.ejectedUntil.Load() > now.UnixNano() }

// EjectedUntil is when the server's passive ejection ends (the zero time
// for none).
func (s *Server) EjectedUntil() time.Time {
	if n := s.st.ejectedUntil.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// LastCheck returns when the last active check ran and what it found
// ("" and the zero time before any).
func (s *Server) LastCheck() (time.Time, string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.lastCheck, s.st.lastOutcome
}

// Trip is one request's passage through an Upstream: its tries, each on
// a server not tried before. It is used by the request's goroutine only;
// its zero value is not usable (Upstream.Start).
type Trip struct {
	u     *Upstream
	key   uint64 // the request's hash, for Hash
	tried uint64 // bit i: servers[i] was tried
	// Tries is how many tries were started; Panic, whether a choice was
	// made in panic mode.
	Tries int
	Panic bool
}

// Start begins a request's trip at now; key is what Hash hashes (nil for
// other policies).
func (u *Upstream) Start(now time.Time, key []byte) Trip {
	t := Trip{u: u}
	if u.balance == Hash {
		h := fnv.New64a()
		h.Write(key)
		t.key = h.Sum64()
	}
	if len(u.servers) > 1 && u.retries.Attempts > 0 {
		u.mu.Lock()
		u.budget.request(now)
		u.mu.Unlock()
	}
	return t
}

// Next returns the server of the trip's next try at now, counted in
// flight until End, or nil when every server in rotation was tried (on
// the first try, Tries 0, with no error: every server is drained,
// ErrDrained). Servers drained or at their MaxInFlight are not chosen;
// when every other one was tried, Next waits in the group's queue
// (limit.go) until a server takes the request, ctx is done (its error is
// returned) or the queue's timeout passes, and returns ErrBusy if none
// took it.
func (t *Trip) Next(ctx context.Context, now time.Time) (*Server, error) {
	if t.u.limited {
		return t.nextLimited(ctx, now) // limit.go
	}
	c := t.u.choose(t, now)
	t.chosen(c)
	if c.s == nil {
		return nil, nil
	}
	c.s.st.inFlight.Add(1)
	return c.s, nil
}

// choice is what choose found: the server chosen (nil for none), its
// index in the group, whether servers were passed over for being at
// their MaxInFlight (busy), and whether it chose in panic mode.
type choice struct {
	s           *Server
	i           int
	busy, panic bool
}

// chosen counts c in the trip: its try and the server tried, and a choice
// made in panic mode (the hook is called here, outside any lock).
func (t *Trip) chosen(c choice) {
	if c.panic {
		t.Panic = true
		t.u.panics.Add(1)
		if t.u.hooks.OnPanic != nil {
			t.u.hooks.OnPanic()
		}
	}
	if c.s != nil {
		t.tried |= 1 << c.i
		t.Tries++
	}
}

// choose picks among the servers in rotation (not drained), not tried and
// below their MaxInFlight: the healthy ones, or all of them when fewer
// than half of those in rotation are healthy (panic mode: a group that
// looks mostly down is more likely misjudged than down). A drained
// server is never chosen, in panic mode neither: the operator said so.
func (u *Upstream) choose(t *Trip, now time.Time) choice {
	if len(u.servers) == 1 {
		s := u.servers[0]
		switch {
		case t.tried != 0 || u.drainedMask() != 0:
			return choice{}
		case s.full():
			return choice{busy: true}
		}
		return choice{s: s}
	}
	var cand [64]*Server
	var idx [64]int
	var c choice
	out := u.drainedMask() // bit i: servers[i] is drained (below: or tried)
	n, healthy, rotation := 0, 0, len(u.servers)
	for i, s := range u.servers {
		if out&(1<<i) != 0 {
			rotation--
			continue
		}
		ok := s.Healthy(now)
		if ok {
			healthy++
		}
		if ok && t.tried&(1<<i) == 0 {
			if s.full() {
				c.busy = true
				continue
			}
			cand[n], idx[n] = s, i
			n++
		}
	}
	if healthy*2 < rotation {
		n, c.busy = 0, false
		out |= t.tried
		for i, s := range u.servers {
			if out&(1<<i) == 0 {
				if s.full() {
					c.busy = true
					continue
				}
				cand[n], idx[n] = s, i
				n++
			}
		}
		c.panic = n > 0
	}
	if n == 0 {
		return c
	}
	var k int
	switch u.balance {
	case LeastRequests:
		k = leastLoaded(cand[:n], 0, n)
	case RandomTwo:
		a := rand.IntN(n)
		b := a
		if n > 1 {
			b = (a + 1 + rand.IntN(n-1)) % n
		}
		k = a
		if lessLoaded(cand[b], cand[a]) {
			k = b
		}
	case Hash:
		k = rendezvous(cand[:n], t.key)
	default:
		u.mu.Lock()
		k = smoothRoundRobin(cand[:n])
		u.mu.Unlock()
	}
	c.s, c.i = cand[k], idx[k]
	return c
}

// smoothRoundRobin is nginx's smooth weighted round robin over cand: each
// gains its weight, the one with the most is chosen and loses the total.
// The caller holds the group's lock.
func smoothRoundRobin(cand []*Server) int {
	total, best, bestCur := int64(0), 0, int64(math.MinInt64)
	for i, s := range cand {
		cur := s.current.Add(int64(s.Weight))
		total += int64(s.Weight)
		if cur > bestCur {
			best, bestCur = i, cur
		}
	}
	cand[best].current.Add(-total)
	return best
}

// lessLoaded reports whether a has fewer requests in flight than b for
// their weights.
func lessLoaded(a, b *Server) bool {
	return a.st.inFlight.Load()*int64(b.Weight) < b.st.inFlight.Load()*int64(a.Weight)
}

// leastLoaded returns the least loaded of cand, ties going to a random one
// of them (so that an idle group is not all sent to its first server).
func leastLoaded(cand []*Server, _, n int) int {
	best, ties := 0, 1
	for i := 1; i < n; i++ {
		switch {
		case lessLoaded(cand[i], cand[best]):
			best, ties = i, 1
		case !lessLoaded(cand[best], cand[i]):
			ties++
			if rand.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// rendezvous returns the server of cand with the highest weighted score
// for key (weighted rendezvous hashing: -w / ln(h), h the hash of key and
// server in (0, 1)).
func rendezvous(cand []*Server, key uint64) int {
	best, bestScore := 0, math.Inf(-1)
	for i, s := range cand {
		h := mix(key ^ s.key)
		f := (float64(h>>11) + 0.5) / (1 << 53) // in (0, 1)
		score := -float64(s.Weight) / math.Log(f)
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// End records the end of a try on s at now, which took took: its
// response status (0 for none) and its failure (0 for none), which
// passive ejection counts.
func (t *Trip) End(s *Server, status int, f Failure, took time.Duration, now time.Time) {
	t.u.release(s, now) // limit.go
	class := 5
	if status >= 100 && status < 600 {
		class = status/100 - 1
	}
	s.st.responses[class].Add(1)
	u := t.u
	if u.hooks.OnResponse != nil {
		u.hooks.OnResponse(s, status, took)
	}
	if f != 0 && u.passive != nil && f&u.passive.On != 0 {
		u.failed(s, now)
	}
}

// failed counts a failure of s at now, and ejects s at the group's
// MaxFails within FailWindow, unless half the group is ejected already.
func (u *Upstream) failed(s *Server, now time.Time) {
	p := u.passive
	s.st.mu.Lock()
	if s.st.failsSince.IsZero() || now.Sub(s.st.failsSince) > p.FailWindow || now.Before(s.st.failsSince) {
		s.st.fails, s.st.failsSince = 0, now
	}
	s.st.fails++
	eject := s.st.fails >= p.MaxFails && !s.ejected(now)
	s.st.mu.Unlock()
	if !eject {
		return
	}
	// The count and the ejection under the group's lock: two failing
	// servers cannot both pass the count.
	u.mu.Lock()
	ejected := 0
	for _, o := range u.servers {
		if o.ejected(now) {
			ejected++
		}
	}
	if (ejected+1)*2 > len(u.servers) {
		u.mu.Unlock()
		return // at most half the group is ejected at once
	}
	s.st.mu.Lock()
	s.st.fails, s.st.failsSince, s.st.passes = 0, time.Time{}, 0
	s.st.ejectedUntil.Store(now.Add(p.EjectFor).UnixNano())
	s.st.mu.Unlock()
	u.mu.Unlock()
	s.st.ejections[0].Add(1)
	if u.hooks.OnEject != nil {
		u.hooks.OnEject(s, "passive")
	}
}

// Retry outcomes, as edge_origin_retries_total's outcome label names
// them.
const (
	RetrySent     = iota // a retry was sent
	RetryBudget          // refused: the budget was spent
	RetryNoServer        // refused: every server was tried
	retryOutcomes
)

var retryOutcomeNames = [retryOutcomes]string{"sent", "budget_exhausted", "no_server"}

// RetryOutcomes are the outcome labels of retries, in order.
func RetryOutcomes() []string { return retryOutcomeNames[:] }

// MayRetry reports whether the trip, whose last try failed with f at
// now, may try again on another server: tries are left, f is retried,
// the request is safe to send again (safe: idempotent, or f is
// FailConnect, nothing of it sent; its body buffered whole or empty; no
// byte of a response sent to the client: the caller says), and the budget
// allows it. A retry allowed is counted in the budget.
func (t *Trip) MayRetry(f Failure, safe bool, now time.Time) bool {
	u := t.u
	if f == 0 || f&u.retries.On == 0 || !safe || t.Tries > u.retries.Attempts || len(u.servers) < 2 {
		return false
	}
	if t.untried() == 0 {
		u.retried[RetryNoServer].Add(1)
		return false
	}
	u.mu.Lock()
	ok := u.budget.retry(now, u.retries.Budget)
	u.mu.Unlock()
	if !ok {
		u.retried[RetryBudget].Add(1)
		return false
	}
	u.retried[RetrySent].Add(1)
	return true
}

// untried is how many servers in rotation (not drained) the trip has
// not tried.
func (t *Trip) untried() int {
	all := uint64(1)<<len(t.u.servers) - 1 // at most 64 servers: 1<<64 - 1 is all ones
	return bits.OnesCount64(all &^ (t.tried | t.u.drainedMask()))
}

// drainMask is which servers of a group a set of drains takes out: bit i
// for servers[i].
type drainMask struct {
	set  *map[string]struct{}
	mask uint64
}

// drainedMask returns the bits of u's drained servers: one atomic load
// while none is drained, two while the set is the one last seen; a new
// set is looked up by name once.
func (u *Upstream) drainedMask() uint64 {
	if u.drains == nil {
		return 0
	}
	set := u.drains.set.Load()
	if set == nil {
		return 0
	}
	if m := u.drainCache.Load(); m != nil && m.set == set {
		return m.mask
	}
	var mask uint64
	for i, s := range u.servers {
		if _, ok := (*set)[s.Name]; ok {
			mask |= 1 << i
		}
	}
	// A store racing a drain may put back a mask of the older set: it is
	// keyed by that set, so the next call makes the mask again, and none
	// is read for a set it was not made from.
	u.drainCache.Store(&drainMask{set, mask})
	return mask
}

// Idempotent reports whether a request of method may be sent twice with
// the same effect (RFC 9110, 9.2.2, as the retries take it).
func Idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// budget counts a group's requests and retries per second over the last
// budgetSeconds, under the group's lock.
type budget struct {
	sec              [budgetSeconds]int64 // the second each slot counts (unix)
	requests, retrys [budgetSeconds]int
}

const (
	budgetSeconds = 10
	// minRetries a second are always allowed, so that a quiet group
	// still retries its first failure.
	minRetries = 3
)

func (b *budget) slot(now time.Time) int {
	sec := now.Unix()
	i := int(uint64(sec) % budgetSeconds)
	if b.sec[i] != sec {
		b.sec[i], b.requests[i], b.retrys[i] = sec, 0, 0
	}
	return i
}

func (b *budget) request(now time.Time) { b.requests[b.slot(now)]++ }

// retry reports whether a retry at now stays within share of the
// requests of the last budgetSeconds (or minRetries this second), and
// counts it if so.
func (b *budget) retry(now time.Time, share float64) bool {
	i := b.slot(now)
	sec := now.Unix()
	requests, retries := 0, 0
	for j := range budgetSeconds {
		if sec-b.sec[j] < budgetSeconds && b.sec[j] <= sec {
			requests += b.requests[j]
			retries += b.retrys[j]
		}
	}
	if b.retrys[i] >= minRetries && float64(retries+1) > share*float64(requests) {
		return false
	}
	b.retrys[i]++
	return true
}
