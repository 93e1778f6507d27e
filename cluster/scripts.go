package cluster

import (
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// The Lua scripts edge runs in Redis. Each is sent once per server with
// SCRIPT LOAD and run with EVALSHA; a server that answers NOSCRIPT (it
// restarted, or its script cache was flushed) gets the script again, with
// EVAL, and then SCRIPT LOAD (rueidis Lua.Exec, and reload in flush).
//
// Keys: every script is passed the key prefix of one client under one rule,
//
//	edge:<pop>:<domain>:<rule>:<period>s:{<hash>}
//
// and builds the names it writes from it: "<prefix>:<start>" counts the
// requests of the period starting at Unix second <start> (periods are
// aligned to the epoch), "<prefix>:m" holds the end of a mitigation. The
// {hash} is a Redis Cluster hash tag, so all of a client's keys under a rule
// are in one slot, which is what lets one script read and write them
// atomically there. Every key written gets a TTL in the same script: two
// periods for counters, the mitigation's length for a mitigation.

// script is one Lua script: rueidis runs it (Lua.Exec) for single round
// trips; flush pipelines EVALSHA of sha itself, and loadScripts sends src.
type script struct {
	lua *rueidis.Lua
	src string
	sha string // SHA-1 of src, hex
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{lua: rueidis.NewLuaScript(src), src: src, sha: hex.EncodeToString(sum[:])}
}

// lessProduct is Lua shared by the scripts that decide: a×b < c×d, exactly,
// for integers below 2⁵³. Lua 5.1 (Redis's) has only doubles, whose 53-bit
// mantissa cannot hold the products (a count of 10⁹ times a period of 2.6×10¹²
// µs), so they are multiplied in base-2²⁴ limbs, each partial product below
// 2⁵⁰.
const lessProduct = `
local B = 16777216
local function split(x)
  local x0 = x % B
  x = (x - x0) / B
  local x1 = x % B
  return x0, x1, (x - x1) / B
end
local function mul(a, b)
  local a0, a1, a2 = split(a)
  local b0, b1, b2 = split(b)
  local r = {a0*b0, a0*b1 + a1*b0, a0*b2 + a1*b1 + a2*b0, a1*b2 + a2*b1, a2*b2, 0}
  for i = 1, 5 do
    local c = math.floor(r[i] / B)
    r[i] = r[i] - c * B
    r[i+1] = r[i+1] + c
  end
  return r
end
local function lessProduct(a, b, c, d)
  local x, y = mul(a, b), mul(c, d)
  for i = 6, 1, -1 do
    if x[i] ~= y[i] then return x[i] < y[i] end
  end
  return false
end
`

// clock is Lua shared by the scripts that judge: now(arg) is Redis's
// clock (TIME) in µs, or arg when a test passes the time (µs since the
// epoch) as an argument; production never does.
const clock = `
local function now(arg)
  if arg and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`

// readCounts is Lua shared by the scripts that read a client's window
// counters: with ARGV[2] the period in µs and the time from ARGV[6] (see
// clock), it sets now (µs), e (µs into the period), start (the period's
// start, Unix s), the key names ck, pk and mk of the current and previous
// periods' counts and of the mitigation, and curr and prev (always 0 in a
// fixed window, whose previous period does not count).
func readCounts(fixed bool) string {
	prev := "tonumber(redis.call('GET', pk) or '0')"
	if fixed {
		prev = "0"
	}
	return clock + `
local period = tonumber(ARGV[2])
local now = now(ARGV[6])
local w = math.floor(now / period)
local e = now - w * period
local start = w * (period / 1000000)
local ck = KEYS[1] .. ':' .. string.format('%.0f', start)
local pk = KEYS[1] .. ':' .. string.format('%.0f', start - period / 1000000)
local mk = KEYS[1] .. ':m'
local curr = tonumber(redis.call('GET', ck) or '0')
local prev = ` + prev + `
`
}

// windowLua judges one request of a window in exact mode, as
// window.Store.AllowN does: with target = limit − (cost − 1) for a cost
// above 1 (limit at cost 0 or 1), allowed iff no mitigation is in force,
// target > 0 and prev×(P−e) < (target−curr)×P (prev is 0 in a fixed
// window). It counts the cost if allowed, or if the rule counts blocked
// requests and the cost could ever be allowed; such a blocked request
// starts a mitigation when the rule has one and none is in force, ending
// on a whole millisecond, rounded up, as the store's does. A sliding
// window's counts live two periods, a fixed window's one: a past window
// disappears.
//
// A soft window (ARGV[4] 's') is judged by the node (window.Limit.
// JudgeSoft): the script counts every request whose cost the limit can
// hold, never mitigates, and keeps in the mitigation's key the end of the
// key's warm-up, one period from its first request after a quiet period,
// returned as the mitigation left.
//
// KEYS[1] key prefix; ARGV limit, period (µs), mitigation (µs),
// count_blocked (0, 1, or s for a soft window), cost (1 if absent), the
// time (µs; absent: TIME).
// Returns {allowed, counted, prev, curr (after counting), elapsed (µs),
// mitigation left (µs), period start (Unix s)}.
func windowLua(fixed bool) string {
	periods := "2"
	if fixed {
		periods = "1"
	}
	return lessProduct + readCounts(fixed) + `
local limit = tonumber(ARGV[1])
local mitigation = tonumber(ARGV[3])
local cost = tonumber(ARGV[5] or '1')
local target = limit
if cost > 1 then target = limit - math.min(cost - 1, limit) end
local soft = ARGV[4] == 's'
local left = 0
if mitigation > 0 or soft then
  local untilT = tonumber(redis.call('GET', mk) or '0')
  if untilT > now then left = untilT - now end
end
if soft and prev == 0 and curr == 0 and cost > 0 and target > 0 then
  local untilT = now + period
  left = period
  redis.call('SET', mk, string.format('%.0f', untilT), 'PX', math.ceil(period / 1000))
end
local allowed = 0
if not soft and left == 0 and target > 0 and curr < target and (prev == 0 or lessProduct(prev, period - e, target - curr, period)) then
  allowed = 1
end
local counted = 0
if cost > 0 and (allowed == 1 or (target > 0 and ARGV[4] ~= '0')) then
  curr = redis.call('INCRBY', ck, cost)
  redis.call('PEXPIRE', ck, ` + periods + ` * period / 1000)
  counted = 1
end
if allowed == 0 and left == 0 and target > 0 and mitigation > 0 then
  local untilT = math.ceil((now + mitigation) / 1000) * 1000
  left = untilT - now
  redis.call('SET', mk, string.format('%.0f', untilT), 'PX', math.ceil(left / 1000))
end
return {allowed, counted, prev, curr, e, left, start}
`
}

// decideScript judges a request under a sliding window (windowLua).
var decideScript = newScript(windowLua(false))

// fixedScript judges a request under a fixed window (windowLua).
var fixedScript = newScript(windowLua(true))

// bucketScript judges a request under a token or a leaky bucket (the two
// are one state, seen from two sides), charges units after the fact, or
// reads the bucket, in exact mode, as window.Store's buckets do: by GCRA,
// in exact integer arithmetic. The state, under "<prefix>:b", is the
// theoretical arrival time tat (when the bucket is full again) as
// "<s> <ns> <frac>" (Unix seconds, nanoseconds, and a fraction of a
// nanosecond with denominator limit) and the end of a mitigation, "<ms>"
// (Unix ms, 0 for none). The script works on the level, tat − now, a span
// of ns and frac below 2×burst units' time, so under 2⁵³ ns (rules.MaxFill
// bounds a bucket's fill time), which Lua's doubles hold exactly; the units
// a request takes are computed by package window (Limit.Units) and passed
// in. The key lives until the bucket is full again and no mitigation is in
// force, and a second more: a full bucket disappears.
//
// KEYS[1] key prefix; ARGV: mode ('d' decide, 'c' charge, 'r' refund, 'p'
// peek), limit, full (ns, frac: burst units' time), units (ns, frac: the
// units of max(cost, 1), or of the charge or refund), cost (or the charge
// or refund), burst,
// mitigation (ns), count_blocked (0 or 1), the time (µs; "": TIME),
// max_delay (ns; absent: 0, a meter).
// Returns {allowed, counted, level ns, level frac, mitigation left (ns)}.
var bucketScript = newScript(clock + `
local mode = ARGV[1]
local L = tonumber(ARGV[2])
local fullN, fullF = tonumber(ARGV[3]), tonumber(ARGV[4])
local uN, uF = tonumber(ARGV[5]), tonumber(ARGV[6])
local cost = tonumber(ARGV[7])
local burst = tonumber(ARGV[8])
local mitigation = tonumber(ARGV[9])
local t = now(ARGV[11])
local ts = math.floor(t / 1000000)
local tns = (t - ts * 1000000) * 1000
local function add(an, af, bn, bf)
  an, af = an + bn, af + bf
  if af >= L then an, af = an + 1, af - L end
  return an, af
end
local function less(an, af, bn, bf) return an < bn or (an == bn and af < bf) end
local function sub(an, af, bn, bf)
  if not less(bn, bf, an, af) then return 0, 0 end
  an = an - bn
  if af < bf then an, af = an - 1, af + L - bf else af = af - bf end
  return an, af
end
local bk = KEYS[1] .. ':b'
local lvN, lvF, mit = 0, 0, 0
local v = redis.call('GET', bk)
if v then
  local s, n, f, m = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')
  if s then
    lvN, lvF, mit = (tonumber(s) - ts) * 1000000000 + (tonumber(n) - tns), tonumber(f), tonumber(m)
    if lvF >= L then lvF = L - 1 end -- written under a larger limit
    if lvN < 0 then lvN, lvF = 0, 0 end
  end
end
local left = 0
if mit > 0 then
  left = (mit - ts * 1000) * 1000000 - tns
  if left < 0 then left, mit = 0, 0 end
end
local function raise()
  local topN, topF = add(fullN, fullF, fullN, fullF)
  if not less(lvN, lvF, topN, topF) then return end
  local rN, rF = sub(topN, topF, lvN, lvF)
  if less(rN, rF, uN, uF) then lvN, lvF = topN, topF else lvN, lvF = add(lvN, lvF, uN, uF) end
end
local allowed, counted, changed = 0, 0, false
if mode == 'c' then
  raise()
  counted, changed = 1, true
elseif mode == 'r' then
  lvN, lvF = sub(lvN, lvF, uN, uF)
  changed = true
elseif mode == 'd' then
  if left == 0 and cost <= burst then
    -- A queue (max_delay above 0) takes the request if its turn, when
    -- the level has drained to full less its units, comes within
    -- max_delay; its units are counted now, so those after it wait longer.
    local rN, rF = sub(fullN, fullF, uN, uF)
    rN = rN + tonumber(ARGV[12] or '0')
    if not less(rN, rF, lvN, lvF) then allowed = 1 end
  end
  if allowed == 1 then
    if cost > 0 then
      lvN, lvF = add(lvN, lvF, uN, uF)
      counted, changed = 1, true
    end
  elseif cost <= burst then
    if ARGV[10] == '1' and cost > 0 then
      raise()
      counted, changed = 1, true
    end
    if left == 0 and mitigation > 0 then
      mit = ts * 1000 + math.ceil((tns + mitigation) / 1000000)
      left = (mit - ts * 1000) * 1000000 - tns
      changed = true
    end
  end
end
if changed then
  -- A second more than the state needs: Redis expires keys by its own
  -- clock, which a script judging at a time passed in (tests) runs ahead
  -- of, and a key must never be gone while its state says it is in use.
  local ttl = math.ceil(math.max(lvN + 1, left) / 1000000) + 1000
  if lvN == 0 and lvF == 0 and left == 0 then
    redis.call('DEL', bk)
  else
    local total = tns + lvN
    local sec = math.floor(total / 1000000000)
    redis.call('SET', bk, string.format('%.0f %.0f %.0f %.0f', ts + sec, total - sec * 1000000000, lvF, mit), 'PX', ttl)
  end
end
return {allowed, counted, lvN, lvF, left}
`)

// quotaScript judges a request under a quota in exact mode, as
// window.Store does, or reads the quota ('p'). The calendar is Go's
// (window.Limit.QuotaPeriod): the caller passes the period holding its own
// clock and the one after it, and the script counts in the second once
// Redis's clock has reached the first's end, so a period turns over on
// Redis's clock (a node whose clock is ahead of Redis's by s starts a
// period up to s early). The count of period <index> is "<prefix>:<index>";
// a request is allowed iff no mitigation is in force and count + cost ≤
// limit (count < limit at cost 0); it counts as windowLua counts, and a
// mitigation is as windowLua's. The count lives until its period ends and
// a second more: a past period disappears.
//
// KEYS[1] key prefix; ARGV: mode ('d' decide, 'p' peek), limit,
// mitigation (µs), count_blocked (0 or 1), cost, index, end (µs), next
// index, next end (µs), the time (µs; absent: TIME). Returns {allowed,
// counted, count (after counting), µs to the period's end, mitigation left
// (µs), index}.
var quotaScript = newScript(clock + `
local limit = tonumber(ARGV[2])
local mitigation = tonumber(ARGV[3])
local cost = tonumber(ARGV[5])
local t = now(ARGV[10])
local idx, e = ARGV[6], tonumber(ARGV[7])
if t >= e then idx, e = ARGV[8], tonumber(ARGV[9]) end
local ck = KEYS[1] .. ':' .. idx
local mk = KEYS[1] .. ':m'
local count = tonumber(redis.call('GET', ck) or '0')
local left = 0
local untilT = tonumber(redis.call('GET', mk) or '0')
if untilT > t then left = untilT - t end
local target = limit
if cost > 1 then target = limit - math.min(cost - 1, limit) end
local allowed, counted = 0, 0
if ARGV[1] == 'd' then
  if left == 0 and target > 0 and count < target then allowed = 1 end
  if cost > 0 and (allowed == 1 or (target > 0 and ARGV[4] == '1')) then
    count = redis.call('INCRBY', ck, cost)
    redis.call('PEXPIRE', ck, math.ceil((e - t) / 1000) + 1000)
    counted = 1
  end
  if allowed == 0 and left == 0 and target > 0 and mitigation > 0 then
    untilT = math.ceil((t + mitigation) / 1000) * 1000
    left = untilT - t
    redis.call('SET', mk, string.format('%.0f', untilT), 'PX', math.ceil(left / 1000))
  end
end
return {allowed, counted, count, e - t, left, tonumber(idx)}
`)

// refundScript takes back the ARGV[2] units (1 if absent) counted in the
// period starting at ARGV[1] (Unix s), for a request another rule blocked,
// down to 0. It never creates a key (DECRBY of a missing key would make one
// without a TTL) and keeps the key's TTL.
var refundScript = newScript(`
local k = KEYS[1] .. ':' .. ARGV[1]
local n = tonumber(redis.call('GET', k) or '0')
if n > 0 then redis.call('DECRBY', k, math.min(n, tonumber(ARGV[2] or '1'))) end
return n
`)

// flushScript adds a batched node's count since its last flush, ARGV[3]
// (possibly 0, or negative after refunds), to the period starting at
// ARGV[1] (Unix s) of a rule with period ARGV[2] (s), and returns the
// PoP-wide counts {prev, curr} of that period and the one before.
var flushScript = newScript(`
local start = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local delta = tonumber(ARGV[3])
local ck = KEYS[1] .. ':' .. ARGV[1]
local pk = KEYS[1] .. ':' .. string.format('%.0f', start - period)
local curr
if delta ~= 0 then
  curr = redis.call('INCRBY', ck, delta)
  if curr < 0 then
    curr = 0
    redis.call('SET', ck, '0')
  end
  redis.call('PEXPIRE', ck, 2000 * period)
else
  curr = tonumber(redis.call('GET', ck) or '0')
end
return {tonumber(redis.call('GET', pk) or '0'), curr}
`)

// heartbeatScript registers node ARGV[1] (ARGV[3] = '1') or removes it
// ('0') in the sorted set KEYS[1] of the PoP's nodes, scored by Redis's
// clock in ms, drops nodes not seen for ARGV[2] ms, and returns how many
// are left. The set expires ARGV[2] ms after the last heartbeat.
var heartbeatScript = newScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
local n = redis.call('ZCARD', KEYS[1])
if n > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return n
`)

// forgetScript deletes a client's counters and mitigation under one rule
// (the admin API's DELETE): the periods starting at ARGV[1] and ARGV[2],
// the mitigation, and a bucket's state.
var forgetScript = newScript(`
return redis.call('DEL', KEYS[1] .. ':' .. ARGV[1], KEYS[1] .. ':' .. ARGV[2], KEYS[1] .. ':m', KEYS[1] .. ':b')
`)

// peekLua reads a client's window counters under one rule without
// changing them (the admin API's GET in exact mode), on Redis's clock as
// windowLua reads them. KEYS[1] key prefix; ARGV as windowLua's (only the
// period, ARGV[2] in µs, is used). Returns {prev, curr, elapsed (µs),
// mitigation left (µs)}.
func peekLua(fixed bool) string {
	return readCounts(fixed) + `
local left = 0
local untilT = tonumber(redis.call('GET', mk) or '0')
if untilT > now then left = untilT - now end
return {prev, curr, e, left}
`
}

// peekScript and fixedPeekScript read a sliding and a fixed window
// (peekLua).
var (
	peekScript      = newScript(peekLua(false))
	fixedPeekScript = newScript(peekLua(true))
)

var allScripts = []*script{decideScript, fixedScript, bucketScript, quotaScript, refundScript, flushScript, heartbeatScript, forgetScript, peekScript, fixedPeekScript}

// ScriptSources returns the Lua source of the scripts behind exact-mode
// decisions and batched flushes, for tools that replay edge's Redis
// workload (bench/redisclient compares Redis clients on them).
func ScriptSources() (decide, flush string) {
	return decideScript.src, flushScript.src
}
