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

// readCounts is Lua shared by the scripts that read a client's counters:
// on Redis's clock, with ARGV[2] the period in µs, it sets now (µs), e (µs
// into the period), start (the period's start, Unix s), the key names ck,
// pk and mk of the current and previous periods' counts and of the
// mitigation, and curr and prev.
const readCounts = `
local period = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local w = math.floor(now / period)
local e = now - w * period
local start = w * (period / 1000000)
local ck = KEYS[1] .. ':' .. string.format('%.0f', start)
local pk = KEYS[1] .. ':' .. string.format('%.0f', start - period / 1000000)
local mk = KEYS[1] .. ':m'
local curr = tonumber(redis.call('GET', ck) or '0')
local prev = tonumber(redis.call('GET', pk) or '0')
`

// decideScript judges one request in exact mode, on Redis's clock, as
// window.Store.Allow does: allowed iff no mitigation is in force and
// prev×(P−e) < (limit−curr)×P. It counts the request if allowed, or if the
// rule counts blocked requests; a blocked request starts a mitigation when
// the rule has one and none is in force.
//
// KEYS[1] key prefix; ARGV limit, period (µs), mitigation (µs),
// count_blocked (0 or 1).
// Returns {allowed, counted, prev, curr (after counting), elapsed (µs),
// mitigation left (µs), period start (Unix s)}.
var decideScript = newScript(lessProduct + readCounts + `
local limit = tonumber(ARGV[1])
local mitigation = tonumber(ARGV[3])
local left = 0
if mitigation > 0 then
  local untilT = tonumber(redis.call('GET', mk) or '0')
  if untilT > now then left = untilT - now end
end
local allowed = 0
if left == 0 and curr < limit and (prev == 0 or lessProduct(prev, period - e, limit - curr, period)) then
  allowed = 1
end
local counted = 0
if allowed == 1 or ARGV[4] == '1' then
  curr = redis.call('INCR', ck)
  redis.call('PEXPIRE', ck, 2 * period / 1000)
  counted = 1
end
if allowed == 0 and left == 0 and mitigation > 0 then
  left = mitigation
  redis.call('SET', mk, string.format('%.0f', now + mitigation), 'PX', math.ceil(mitigation / 1000))
end
return {allowed, counted, prev, curr, e, left, start}
`)

// refundScript takes back one request counted in the period starting at
// ARGV[1] (Unix s), for a request another rule blocked. It never creates a
// key (DECR of a missing key would make one without a TTL) and keeps the
// key's TTL.
var refundScript = newScript(`
local k = KEYS[1] .. ':' .. ARGV[1]
local n = tonumber(redis.call('GET', k) or '0')
if n > 0 then redis.call('DECR', k) end
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
// (the admin API's DELETE): the periods starting at ARGV[1] and ARGV[2].
var forgetScript = newScript(`
return redis.call('DEL', KEYS[1] .. ':' .. ARGV[1], KEYS[1] .. ':' .. ARGV[2], KEYS[1] .. ':m')
`)

// peekScript reads a client's counters under one rule without changing
// them (the admin API's GET in exact mode), on Redis's clock as
// decideScript reads them. KEYS[1] key prefix; ARGV as decideScript's (only
// the period, ARGV[2] in µs, is used). Returns {prev, curr, elapsed (µs),
// mitigation left (µs)}.
var peekScript = newScript(readCounts + `
local left = 0
local untilT = tonumber(redis.call('GET', mk) or '0')
if untilT > now then left = untilT - now end
return {prev, curr, e, left}
`)

var allScripts = []*script{decideScript, refundScript, flushScript, heartbeatScript, forgetScript, peekScript}

// ScriptSources returns the Lua source of the scripts behind exact-mode
// decisions and batched flushes, for tools that replay edge's Redis
// workload (bench/redisclient compares Redis clients on them).
func ScriptSources() (decide, flush string) {
	return decideScript.src, flushScript.src
}
