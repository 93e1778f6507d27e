package rls

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/edgerate/edge/cluster"
	"github.com/edgerate/edge/headers"
	"github.com/edgerate/edge/internal/algorithm"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/window"
)

// Options configure a Service.
type Options struct {
	// Table is the compiled configuration: its rls section says how to
	// count, its max_keys how many keys each domain's store holds.
	Table *rules.Table
	// Config is the loaded Lyft configuration.
	Config *Config
	// Cluster, when not nil, counts through Redis as the cluster section
	// says (exact or batched); nil counts on this node alone.
	Cluster *cluster.Client
	// Registerer receives the service's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time
}

// Service answers ShouldRateLimit. Make it with New; it is safe for
// concurrent use. Reload swaps its configuration atomically: a request is
// decided entirely by the configuration it started with.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	cluster *cluster.Client
	now     func() time.Time
	metrics *metrics
	health  *health.Server

	mu    sync.Mutex // serialises Reload and Close
	state atomic.Pointer[state]
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// state is one configuration, compiled for counting.
type state struct {
	algorithm      algorithm.Algorithm
	headers        bool
	maxDescriptors int // rls.max_descriptors
	domains        map[string]*domainState
}

// domainState is one Lyft domain with its counters.
type domainState struct {
	*Domain
	store   *window.Store
	counter window.Counter
	limits  []window.Limit
	// stats are the metric counters of each entry with a limit, by entry.
	stats     map[*Descriptor]*entryStats
	noLimit   *entryStats
	requests  [numCodes]prometheus.Counter
	closeable interface{ Close() }
}

// New returns a Service for opts.
func New(opts Options) (*Service, error) {
	if opts.Table == nil || opts.Config == nil {
		return nil, errors.New("rls: a service needs a table and a config")
	}
	s := &Service{cluster: opts.Cluster, now: opts.Now, health: health.NewServer()}
	if s.now == nil {
		s.now = time.Now
	}
	s.metrics = newMetrics(opts.Registerer)
	if err := s.Reload(opts.Table, opts.Config); err != nil {
		return nil, err
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// Register registers the service, the standard gRPC health service
// (grpc.health.v1.Health) and server reflection (grpc.reflection.v1 and
// v1alpha) on g. Reflection lets a client such as grpcurl list the
// services and call them without their .proto files; it tells nothing a
// client could not read in the public Envoy and gRPC protos.
func (s *Service) Register(g *grpc.Server) {
	pb.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
}

// Shutdown makes the health service answer NOT_SERVING from now on, so
// that probes steer Envoy away while in-flight calls drain.
func (s *Service) Shutdown() { s.health.Shutdown() }

// Reload makes t's rls section and cfg the running configuration. A
// domain whose counted limits and algorithm are unchanged keeps its
// counters; any other starts counting afresh.
func (s *Service) Reload(t *rules.Table, cfg *Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Load()
	st := &state{algorithm: t.RLS.Algorithm, headers: t.RLS.ResponseHeaders, maxDescriptors: t.RLS.MaxDescriptors, domains: map[string]*domainState{}}
	if st.maxDescriptors < 1 {
		st.maxDescriptors = rules.DefaultMaxDescriptors
	}
	perDomain := max(t.MaxKeys/max(len(cfg.Domains), 1), 1<<14)
	var made []*domainState
	for name, d := range cfg.Domains {
		ds := &domainState{Domain: d, stats: map[*Descriptor]*entryStats{}}
		ds.limits = make([]window.Limit, len(d.Limits))
		for i, lk := range d.Limits {
			ds.limits[i] = limitOf(name, lk, st.algorithm)
		}
		var prev *domainState
		if old != nil {
			prev = old.domains[name]
		}
		if prev != nil && slices.Equal(prev.limits, ds.limits) {
			ds.store, ds.counter, ds.closeable = prev.store, prev.counter, prev.closeable
		} else if len(ds.limits) > 0 {
			var err error
			if ds.store, err = window.New(window.Options{Capacity: perDomain, Limits: ds.limits}); err != nil {
				closeAll(made)
				return fmt.Errorf("rls: domain %q: %w", name, err)
			}
			ds.counter = ds.store.Counter()
			if s.cluster != nil {
				rs := make([]cluster.Rule, len(d.Limits))
				for i, lk := range d.Limits {
					rs[i] = cluster.Rule{Name: strconv.FormatUint(uint64(lk.RequestsPerUnit), 10) + "_per_" + lk.Unit.String()}
				}
				cd, err := s.cluster.Domain("rls."+name, rs, ds.store)
				if err != nil {
					closeAll(made)
					return fmt.Errorf("rls: domain %q: %w", name, err)
				}
				ds.counter, ds.closeable = cd, cd
				made = append(made, ds)
			}
		}
		s.metrics.attach(ds)
		st.domains[name] = ds
	}
	s.state.Store(st)
	if old != nil {
		for name, ds := range old.domains {
			if nd := st.domains[name]; ds.closeable != nil && (nd == nil || nd.closeable != ds.closeable) {
				ds.closeable.Close()
			}
		}
	}
	return nil
}

func closeAll(ds []*domainState) {
	for _, d := range ds {
		d.closeable.Close()
	}
}

// Close retires the shared counting of every domain (flushing batched
// counts once more). The cluster client itself is its owner's to close.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state.Load(); st != nil {
		for _, ds := range st.domains {
			if ds.closeable != nil {
				ds.closeable.Close()
				ds.closeable = nil
			}
		}
	}
}

// limitOf is how a rule of domain counts limit lk. A fixed window counts
// every hit, refused ones too, as Lyft's INCRBY does; a sliding window
// counts what it allows, as edge's rules do by default.
func limitOf(domain string, lk LimitKey, a algorithm.Algorithm) window.Limit {
	h := fnv.New64a()
	h.Write([]byte(domain))
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], lk.RequestsPerUnit)
	b[4] = byte(lk.Unit)
	h.Write(b[:5])
	l := window.Limit{
		Algorithm: algorithm.SlidingWindow,
		Limit:     int64(max(lk.RequestsPerUnit, 1)),
		Period:    lk.Unit.Period(),
		Identity:  h.Sum64(),
	}
	if a == algorithm.FixedWindow {
		l.Algorithm, l.CountBlocked = algorithm.FixedWindow, true
	}
	return l
}

// ShouldRateLimit decides a request's descriptors: each is matched to its
// entry (Domain.Match), limits named by another matched limit's replaces
// are dropped, and the rest are counted at the request's cost
// (hits_addend, or a descriptor's own, at least 1 for the request's). The
// answer is OVER_LIMIT if any descriptor outside shadow and quota mode is
// over its limit, or if every quota-mode descriptor is. A call of more
// than rls.max_descriptors descriptors, or with a cost the store cannot
// count (above window.MaxCost), is INVALID_ARGUMENT and counts nothing.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	st := s.state.Load()
	ds := st.domains[req.GetDomain()]
	if err := st.check(req); err != nil {
		if ds != nil {
			ds.requests[codeInvalid].Inc()
		} else {
			s.metrics.unknownInvalid.Inc()
		}
		return nil, err
	}
	now := s.now()
	resp := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(req.Descriptors)),
	}
	if ds == nil {
		// Lyft answers OK for a domain it does not know; so does edge,
		// and counts it without naming it (the name is the client's).
		for i := range resp.Statuses {
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		}
		s.metrics.unknownDomain.Inc()
		return resp, nil
	}
	c := call{ds: ds, now: now, fixed: st.algorithm == algorithm.FixedWindow, resp: resp}
	if ds.counter != nil {
		c.tally = ds.counter.Begin()
		defer c.tally.End()
	}
	matched, replaced := ds.matchAll(req.Descriptors)
	c.gather(req, matched, replaced)
	if !c.decideAll() {
		c.refund()
		s.metrics.unavailable.Inc()
		return nil, status.Error(codes.Unavailable, "the shared counter store did not answer in time")
	}
	for i, d := range req.Descriptors {
		c.judge(i, d, matched[i], replaced)
	}
	if c.failed > 0 || (c.quotaTotal > 0 && c.quotaFailed == c.quotaTotal) {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		// A refused request counts nowhere (edge's rule): give back what
		// the other descriptors counted. Fixed windows count everything,
		// as Lyft does, and keep nothing to give back.
		c.refund()
	}
	if st.headers {
		resp.ResponseHeadersToAdd = responseHeaders(resp.Statuses)
	}
	ds.requests[codeOf(resp.OverallCode)].Inc()
	return resp, nil
}

// check refuses a request that cannot be decided as it is: no domain, no
// descriptors, more descriptors than rls.max_descriptors (each may be a
// decision in Redis), or a hits_addend above what one decision can count.
// A cost above window.MaxCost would be refused by every limit as more than
// it can ever hold, a wrong answer for a limit above it: it is refused as
// invalid instead, saying why.
func (st *state) check(req *pb.RateLimitRequest) error {
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case n == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case n > st.maxDescriptors:
		return status.Errorf(codes.InvalidArgument, "%d descriptors in one call, more than rls.max_descriptors (%d)", n, st.maxDescriptors)
	case int64(req.GetHitsAddend()) > window.MaxCost:
		return status.Errorf(codes.InvalidArgument, "hits_addend %d is more than one request may cost (%d)", req.GetHitsAddend(), window.MaxCost)
	}
	for i, d := range req.GetDescriptors() {
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > window.MaxCost {
			return status.Errorf(codes.InvalidArgument, "descriptors[%d].hits_addend %d is more than one request may cost (%d)", i, h.GetValue(), window.MaxCost)
		}
	}
	return nil
}

// matchAll matches each descriptor to its entry (nil for none) and
// gathers the names the matched limits replace.
func (ds *domainState) matchAll(descs []*rlspb.RateLimitDescriptor) ([]*Descriptor, map[string]bool) {
	matched := make([]*Descriptor, len(descs))
	var replaced map[string]bool
	for i, d := range descs {
		e := ds.Match(d.GetEntries())
		matched[i] = e
		if e != nil && len(e.Limit.Replaces) > 0 {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			for _, r := range e.Limit.Replaces {
				replaced[r] = true
			}
		}
	}
	return matched, replaced
}

// call is one ShouldRateLimit call's account: its tally, the decisions
// it asks the store for, those it may have to give back, and the tallies
// of refusals.
type call struct {
	ds    *domainState
	tally window.Tally
	now   time.Time
	fixed bool // rls.algorithm fixed_window: nothing is given back
	resp  *pb.RateLimitResponse

	// The counted descriptors, in order: each one's index, ID and cost,
	// and its decision once made (decideAll).
	at    []int
	ids   []window.ID
	costs []int64
	decs  []window.Decision
	names []byte // the ids' Names, end to end

	allowed                         []int // indexes into ids of decisions to give back
	failed, quotaFailed, quotaTotal int
}

// counts reports whether entry e, matched by a descriptor, is counted in
// the store: it has a limit above 0 that no other limit replaces.
func counts(e *Descriptor, replaced map[string]bool) bool {
	return e != nil && !e.Limit.Unlimited && !(e.Limit.Name != "" && replaced[e.Limit.Name]) && e.Limit.RequestsPerUnit > 0
}

// gather lists the descriptors the store decides, with their counters'
// names and costs, so that they are decided together.
func (c *call) gather(req *pb.RateLimitRequest, matched []*Descriptor, replaced map[string]bool) {
	var ends []int
	for i, d := range req.Descriptors {
		e := matched[i]
		if !counts(e, replaced) {
			continue
		}
		cost := int64(max(req.GetHitsAddend(), 1))
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(h.GetValue()) // at most window.MaxCost (check)
		}
		c.names = c.ds.appendName(c.names, d.GetEntries())
		ends = append(ends, len(c.names))
		c.at = append(c.at, i)
		c.costs = append(c.costs, cost)
	}
	c.ids = make([]window.ID, len(c.at))
	from := 0
	for j, i := range c.at {
		name := c.names[from:ends[j]:ends[j]]
		c.ids[j] = window.ID{Key: c.ds.store.Key(matched[i].Rule, name), Name: name}
		from = ends[j]
	}
}

// manyTally is a tally that decides and gives back many decisions at once,
// in one round trip to a shared store: package cluster's.
type manyTally interface {
	DecideMany(ids []window.ID, costs []int64, now time.Time, out []window.Decision)
	RefundMany(ids []window.ID, decs []window.Decision, now time.Time, out []window.Decision)
}

// decideAll decides every counted descriptor of the call. It reports false
// if the shared store could not decide.
func (c *call) decideAll() bool {
	c.decs = make([]window.Decision, len(c.ids))
	if m, ok := c.tally.(manyTally); ok {
		m.DecideMany(c.ids, c.costs, c.now, c.decs)
	} else {
		for j, id := range c.ids {
			c.decs[j] = c.tally.Decide(id, c.costs[j], c.now)
		}
	}
	for j, dec := range c.decs {
		if dec.Unavailable {
			return false
		}
		if dec.Allowed && !c.fixed {
			c.allowed = append(c.allowed, j)
		}
	}
	return true
}

// judge sets the status of descriptor i, d, matched to entry e (nil for
// none), from its decision if it was counted.
func (c *call) judge(i int, d *rlspb.RateLimitDescriptor, e *Descriptor, replaced map[string]bool) {
	ds := c.ds
	switch {
	case e == nil:
		c.resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		ds.noLimit.add(outcomeNoLimit)
		return
	case e.Limit.Unlimited:
		c.resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		ds.stats[e].add(outcomeUnlimited)
		return
	case e.Limit.Name != "" && replaced[e.Limit.Name]:
		c.resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		ds.stats[e].add(outcomeReplaced)
		return
	}
	var dec window.Decision
	if j, ok := slices.BinarySearch(c.at, i); ok {
		dec = c.decs[j]
	} else {
		// A limit of 0: nothing is ever allowed; the store cannot hold it.
		dec = window.Decision{Reset: untilPeriodEnd(c.now, ds.limits[e.Rule].Period)}
	}
	c.resp.Statuses[i] = descriptorStatus(e, dec)
	over := !dec.Allowed
	switch {
	case over && e.ShadowMode:
		c.resp.Statuses[i].Code = pb.RateLimitResponse_OK
		ds.stats[e].add(outcomeShadow)
	case over:
		ds.stats[e].add(outcomeOver)
	default:
		ds.stats[e].add(outcomeOK)
	}
	if e.QuotaMode {
		c.quotaTotal++
		if over && !e.ShadowMode {
			c.quotaFailed++
		}
	} else if over && !e.ShadowMode {
		c.failed++
	}
}

// refund gives back every allowed decision of the call, and shows the
// remaining after it in the descriptors' statuses (those set by then).
func (c *call) refund() {
	if len(c.allowed) == 0 {
		return
	}
	ids := make([]window.ID, len(c.allowed))
	decs := make([]window.Decision, len(c.allowed))
	for n, j := range c.allowed {
		ids[n], decs[n] = c.ids[j], c.decs[j]
	}
	after := make([]window.Decision, len(ids))
	if m, ok := c.tally.(manyTally); ok {
		m.RefundMany(ids, decs, c.now, after)
	} else {
		for n, id := range ids {
			after[n] = c.tally.Refund(id, decs[n], c.now)
		}
	}
	for n, j := range c.allowed {
		if st := c.resp.Statuses[c.at[j]]; st != nil {
			st.LimitRemaining = clampRemaining(after[n].Remaining)
		}
	}
	c.allowed = nil
}

// appendName appends the bytes that name a request descriptor's counter:
// its entries, each key and value length-prefixed so that no two
// descriptors spell the same bytes. An entry reached through a wildcard
// with share_threshold counts under the pattern, so that every value the
// pattern matches shares one counter (Lyft's share_threshold).
func (d *Domain) appendName(dst []byte, entries []*rlspb.RateLimitDescriptor_Entry) []byte {
	lv := &d.root
	for _, en := range entries {
		value := en.GetValue()
		if lv != nil {
			if e := lv.find(en.GetKey(), value); e != nil {
				if e.ShareThreshold {
					value = e.Value
				}
				lv = &e.children
			} else {
				lv = nil
			}
		}
		dst = binary.AppendUvarint(dst, uint64(len(en.GetKey())))
		dst = append(dst, en.GetKey()...)
		dst = binary.AppendUvarint(dst, uint64(len(value)))
		dst = append(dst, value...)
	}
	return dst
}

func untilPeriodEnd(now time.Time, p time.Duration) time.Duration {
	return p - time.Duration(now.UnixNano()%int64(p))
}

func clampRemaining(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

func descriptorStatus(e *Descriptor, d window.Decision) *pb.RateLimitResponse_DescriptorStatus {
	code := pb.RateLimitResponse_OK
	if !d.Allowed {
		code = pb.RateLimitResponse_OVER_LIMIT
	}
	reset := d.Reset
	if !d.Allowed && d.RetryAfter > reset {
		reset = d.RetryAfter
	}
	return &pb.RateLimitResponse_DescriptorStatus{
		Code: code,
		CurrentLimit: &pb.RateLimitResponse_RateLimit{
			Name:            e.Limit.Name,
			RequestsPerUnit: e.Limit.RequestsPerUnit,
			Unit:            pb.RateLimitResponse_RateLimit_Unit(e.Limit.Unit),
		},
		LimitRemaining:     clampRemaining(d.Remaining),
		DurationUntilReset: durationpb.New(reset),
	}
}

// responseHeaders are the fields for Envoy to add to the client's
// response, from the status closest to its limit (Lyft picks the same
// one): X-RateLimit-Limit, -Remaining and -Reset, and the IETF draft's
// RateLimit-Policy and RateLimit, formatted by package headers.
func responseHeaders(sts []*pb.RateLimitResponse_DescriptorStatus) []*corepb.HeaderValue {
	var pick *pb.RateLimitResponse_DescriptorStatus
	for _, st := range sts {
		if st.CurrentLimit == nil {
			continue
		}
		if pick == nil || (st.Code == pb.RateLimitResponse_OVER_LIMIT && pick.Code != pb.RateLimitResponse_OVER_LIMIT) ||
			(st.Code == pick.Code && st.LimitRemaining < pick.LimitRemaining) {
			pick = st
		}
	}
	if pick == nil {
		return nil
	}
	lim := pick.CurrentLimit
	reset := pick.DurationUntilReset.AsDuration()
	name := lim.Name
	if name == "" {
		name = "rls"
	}
	period := Unit(lim.Unit).Period()
	h := http.Header{}
	headers.SetXRateLimit(h, int64(lim.RequestsPerUnit), int64(pick.LimitRemaining), reset)
	headers.SetPolicies(h, headers.Policy{Name: name, Quota: int64(lim.RequestsPerUnit), Window: period})
	headers.SetLimits(h, headers.Limit{Name: name, Remaining: int64(pick.LimitRemaining), Reset: reset})
	out := make([]*corepb.HeaderValue, 0, len(h))
	for _, k := range []string{headers.FieldRateLimitPolicy, headers.FieldRateLimit,
		headers.FieldXRateLimitLimit, headers.FieldXRateLimitRemaining, headers.FieldXRateLimitReset} {
		if v := h.Get(k); v != "" {
			out = append(out, &corepb.HeaderValue{Key: k, Value: v})
		}
	}
	return out
}
