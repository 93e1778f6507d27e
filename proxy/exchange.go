package proxy

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/edgerate/edge/graphql"
	"github.com/edgerate/edge/internal/wire"
	"github.com/edgerate/edge/rules"
	"github.com/edgerate/edge/token"
	"github.com/edgerate/edge/window"
)

// exchange is one request's passage through edge, from its head to the
// end of its answer: what the steps find out about it, held in one place
// so that each step reads what the ones before it found. ServeHTTP, the
// check listener and the fast path's Answer each make one per request;
// limit (limit.go) decides it the same way for all three, and the answer
// it leaves (ans) is rendered by whichever transport carries the request.
//
// On the net/http path the exchange travels in the request's context, one
// value (exchangeOf), to the forwarder's hooks; it is used by the
// request's goroutine only (the forwarder's ModifyResponse, ErrorHandler
// and body reads run on it in turn).
type exchange struct {
	st     *state
	d      *domain
	host   string // normalised
	method string
	now    time.Time // the request's one reading of the clock
	fast   bool      // the fast path carries it: limit may decline (stepDecline)
	// req is the request on the net/http path (nil on the fast path),
	// whose Accept field answers are chosen by; the fast path gathers
	// accept from the head instead.
	req    *http.Request
	accept string
	// fwd: the fast forward may carry the request to the origin at all
	// (canForward says whether it can as it is).
	fwd bool

	tls *wire.TLS // the connection's TLS; nil without (tls.go)

	src rules.KeySource // what rules key and match the request by
	id  Identity        // who the client is (identify.go)
	// claims are the request's verified token's, which src.Claims points
	// at (token.go).
	claims      requestClaims
	tokenResult token.Result

	dec ruleDecisions
	// after is what the request's rules still count once the origin
	// answers, with the tally held open for it (charge.go); nil for nothing.
	after *afterResponse
	// fields are the rate-limit fields of rules with headers: always, for
	// the answer or the origin's response (hasFields false: none).
	fields    fields
	hasFields bool
	// body is the client's body as the forward reads it (body.go); nil for
	// a request without one.
	body *clientBody
	// priced is the price of a request to the domain's GraphQL API
	// (graphql.go), in price; nil for one not priced. held gives back the
	// reservation of a body read before the decision; nil for none.
	priced *graphql.Price
	price  graphql.Price
	held   func()
	// plan is the plan the request is on (plans.go), in planBuf; nil for
	// none.
	plan    *planChoice
	planBuf planChoice
	// ans is the answer edge makes itself, when limit or a later step
	// refuses the request.
	ans answer
	// up is what the request's passage to the origin found (the origin
	// component's report), for the access log and metrics; zero when the
	// request was not forwarded.
	up upstreamReport
	// left: its client had left when the origin answered its forward
	// (accesslog.go: noteLeft), so the access log says 499.
	left bool
	// queued is how long the request waited for a queue's turn (queue.go);
	// done is what the fast forward sent the client (accesslog.go): both
	// for the access log.
	queued time.Duration
	done   answerReport

	keys keyBuffer
	vbuf [8]verdict
	// scratch is what the fast path reads the head into (fast.go).
	scratch fastScratch
}

// upstreamReport is what one request's passage to the origin found: the
// server that answered it (or was tried last), the status it answered, how
// long the last try took from the request sent to the response's end, and
// how many tries ran (1 without retries). The zero value: not forwarded.
type upstreamReport struct {
	Server   string // the server's URL as the config names it
	Status   int    // the origin's status; 0 when no response came
	Took     time.Duration
	Attempts int
}

// exchangeKey carries a request's exchange in its context.
type exchangeKey struct{}

// withExchange returns r carrying ex, for the forwarder's hooks.
func withExchange(r *http.Request, ex *exchange) *http.Request {
	r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
	ex.req = r
	return r
}

// Exchanges are reused, so that a request that is refused, or answered by
// its domain's static response, allocates none; one that a request's
// context carried is left to the collector, since the forwarder's hooks
// hold it (ServeHTTP).
var (
	exchanges     = sync.Pool{New: func() any { return newExchange(false) }}
	fastExchanges = sync.Pool{New: func() any { return newExchange(true) }}
)

func newExchange(fast bool) *exchange {
	return &exchange{fast: fast, dec: ruleDecisions{blocker: -1}, keys: keyBuffer{b: make([]byte, 0, 512)}, scratch: fastScratch{xff: make([]string, 0, 8)}}
}

// recycle puts ex back in pool, cleared but for its buffers, unless it grew
// buffers too large to keep. Only what a step may read before it writes is
// cleared, and what would keep the last request's configuration, request
// or body alive: every other field is written before it is read (a
// pointer written while the collector marks costs a barrier, and a
// refusal writes few).
func (ex *exchange) recycle(pool *sync.Pool) {
	s := &ex.scratch
	if cap(ex.keys.b) > maxKeyBuffer || cap(s.view.vals) > 64 || cap(s.path) > 64<<10 || cap(ex.ans.body) > 64<<10 {
		return
	}
	ex.st, ex.d, ex.req, ex.after, ex.body, ex.tls = nil, nil, nil, nil, nil, nil
	ex.priced, ex.held, ex.plan = nil, nil, nil
	ex.src.Claims, ex.claims = nil, requestClaims{}
	ex.fwd, ex.hasFields, ex.left = false, false, false
	ex.up = upstreamReport{}
	ex.queued, ex.done = 0, answerReport{}
	ex.dec, ex.id = ruleDecisions{blocker: -1}, Identity{} // the access log reads them of every request
	ex.keys.b = ex.keys.b[:0]
	s.xff, s.view.vals = s.xff[:0], s.view.vals[:0]
	pool.Put(ex)
}

// exchangeOf returns the exchange a request's context carries, or nil.
func exchangeOf(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// form returns the form of the request's answer: gRPC for a gRPC request
// (grpcRequest; the fast path declines those), JSON if its Accept names
// JSON (acceptsJSON), text otherwise.
func (ex *exchange) form() answerForm {
	accept := ex.accept
	if ex.req != nil {
		if grpcRequest(ex.req.Header) {
			return formGRPC
		}
		accept = ex.req.Header.Get("Accept")
	}
	if acceptsJSON(accept) {
		return formJSON
	}
	return formText
}

// json reports whether the request's answer should be JSON (form).
func (ex *exchange) json() bool {
	return ex.form() == formJSON
}

// begin opens the request's tally on its domain's counter: in Redis modes
// the fast path decides only what needs no round trip.
func (ex *exchange) begin() window.Tally {
	if ex.fast && ex.d.local != nil {
		return ex.d.local.BeginLocal()
	}
	return ex.d.counter.Begin()
}

// canForward reports whether the fast forward can carry the request of
// head as it is (forwardable), asked only once it matters.
func (ex *exchange) canForward(head *Head) bool {
	return ex.fwd && (ex.method == http.MethodHead || forwardable(ex.d, head))
}
