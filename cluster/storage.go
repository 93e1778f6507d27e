package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Storage is the ACME state the nodes of a PoP share in Redis: accounts,
// certificates and their keys, the tokens of challenges in progress, and
// the locks under which one node orders while the others wait. It is a
// small file system of named values ("acme/ca/sites/name/name.crt") with
// directories, and locks by name, as certmagic's Storage interface asks
// (package acme adapts it). Make it with Client.Storage; it is safe for
// concurrent use; Close releases the locks still held.
//
// Every key of it is under one hash tag, edge:acme:{pop}: (a value is a
// hash of its bytes and modification time, an index sorted set lists every
// value's name for directories, a lock is a string with its holder's
// token), so that in Redis Cluster mode a script that touches a value and
// the index runs on one node. Its round trips are not on a request's path
// but an HTTP-01 validation's, never count toward the circuit breaker, and
// are bounded by storageTimeout each. They go over a dedicated connection
// of the client's pool, not the pipelined ones the counters use: rueidis
// fails every command waiting on a shared connection's dial with the
// first one's error, and a counter's budget is a few milliseconds
// (TestStorageBesideShortDeadlines).
type Storage struct {
	c      *Client
	prefix string // edge:acme:{pop}:
	index  string

	mu    sync.Mutex
	held  map[string]*heldLock // by lock name
	wg    sync.WaitGroup       // the lock refreshers
	close sync.Once
}

// KeyInfo describes a value of a Storage (Stat), or a directory.
type KeyInfo struct {
	Key        string
	Modified   time.Time
	Size       int64
	IsTerminal bool // a value, not a directory
}

// heldLock is a lock this node holds, kept alive by its refresher.
type heldLock struct {
	token string
	stop  chan struct{}
}

// Locks last lockTTL past their holder's last refresh, every lockRefresh:
// a node that dies holding one holds up the others for at most lockTTL. A
// node waiting for a lock tries again every lockPoll.
const (
	lockTTL        = 30 * time.Second
	lockRefresh    = lockTTL / 3
	lockPoll       = 250 * time.Millisecond
	storageTimeout = 5 * time.Second
)

// Storage returns the PoP's ACME state in Redis.
func (c *Client) Storage() *Storage {
	prefix := "edge:acme:{" + c.pop + "}:"
	return &Storage{c: c, prefix: prefix, index: prefix + "index", held: make(map[string]*heldLock)}
}

// storeScript sets a value and enters its name in the index:
// KEYS[1] the value's hash, KEYS[2] the index; ARGV[1] the name, ARGV[2]
// the bytes, ARGV[3] the modification time (Unix ms).
var storeScript = newScript(`
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'm', ARGV[3])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1`)

// deleteScript deletes a value, or a directory and everything in it:
// KEYS[1] the index; ARGV[1] the name, ARGV[2] the value keys' prefix.
// It returns how many values it deleted.
var deleteScript = newScript(`
local n = redis.call('DEL', ARGV[2] .. ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
local under = redis.call('ZRANGEBYLEX', KEYS[1], '[' .. ARGV[1] .. '/', '(' .. ARGV[1] .. '0')
for _, name in ipairs(under) do
  n = n + redis.call('DEL', ARGV[2] .. name)
  redis.call('ZREM', KEYS[1], name)
end
return n`)

// unlockScript deletes a lock if its token is the caller's: KEYS[1] the
// lock, ARGV[1] the token.
var unlockScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// extendScript extends a lock held with the caller's token: KEYS[1] the
// lock; ARGV[1] the token, ARGV[2] the new TTL (ms). It returns 1 if the
// lock is still the caller's.
var extendScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

func (s *Storage) valueKey(name string) string { return s.prefix + "v:" + name }
func (s *Storage) lockKey(name string) string  { return s.prefix + "lock:" + name }

// do runs fn on a dedicated connection, within storageTimeout of ctx.
func (s *Storage) do(ctx context.Context, fn func(ctx context.Context, dc rueidis.DedicatedClient) error) error {
	rdb := s.c.redis()
	if rdb == nil {
		return errNotConnected
	}
	ctx, cancel := context.WithTimeout(ctx, storageTimeout)
	defer cancel()
	return rdb.Dedicated(func(dc rueidis.DedicatedClient) error { return fn(ctx, dc) })
}

// eval runs sc on dc with EVALSHA, and EVAL if Redis answers NOSCRIPT.
func eval(ctx context.Context, dc rueidis.DedicatedClient, sc *script, keys, args []string) rueidis.RedisResult {
	res := dc.Do(ctx, dc.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if err, ok := rueidis.IsRedisErr(res.Error()); ok && err.IsNoScript() {
		res = dc.Do(ctx, dc.B().Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return res
}

// Store sets the value of name.
func (s *Storage) Store(ctx context.Context, name string, value []byte) error {
	return s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) error {
		return eval(ctx, dc, storeScript, []string{s.valueKey(name), s.index},
			[]string{name, string(value), strconv.FormatInt(time.Now().UnixMilli(), 10)}).Error()
	})
}

// Load returns the value of name; an error wrapping fs.ErrNotExist without
// one.
func (s *Storage) Load(ctx context.Context, name string) ([]byte, error) {
	var b []byte
	err := s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) (err error) {
		b, err = dc.Do(ctx, dc.B().Hget().Key(s.valueKey(name)).Field("v").Build()).AsBytes()
		return err
	})
	if rueidis.IsRedisNil(err) {
		return nil, fmt.Errorf("cluster: %s: %w", name, fs.ErrNotExist)
	}
	return b, err
}

// Delete deletes name, or the directory name and everything in it; a name
// that is neither is no error.
func (s *Storage) Delete(ctx context.Context, name string) error {
	return s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) error {
		return eval(ctx, dc, deleteScript, []string{s.index}, []string{name, s.prefix + "v:"}).Error()
	})
}

// Exists reports whether name is a value or a directory; false when Redis
// cannot say.
func (s *Storage) Exists(ctx context.Context, name string) bool {
	_, err := s.Stat(ctx, name)
	return err == nil
}

// List returns the names in the directory dir: with recursive, every value
// under it; without, its values and directories one level down.
func (s *Storage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	names, err := s.under(ctx, dir, 0)
	if err != nil {
		return nil, err
	}
	if recursive {
		return names, nil
	}
	var out []string
	seen := make(map[string]bool)
	for _, n := range names {
		child, _, _ := strings.Cut(n[len(dir)+1:], "/")
		if child = dir + "/" + child; !seen[child] {
			seen[child] = true
			out = append(out, child)
		}
	}
	return out, nil
}

// under returns the names of the values under the directory dir, at most
// limit (0: all), in order.
func (s *Storage) under(ctx context.Context, dir string, limit int64) ([]string, error) {
	var names []string
	err := s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) (err error) {
		// '0' follows '/': the range is every name that starts with dir/.
		b := dc.B().Zrangebylex().Key(s.index).Min("[" + dir + "/").Max("(" + dir + "0")
		var cmd rueidis.Completed
		if limit > 0 {
			cmd = b.Limit(0, limit).Build()
		} else {
			cmd = b.Build()
		}
		names, err = dc.Do(ctx, cmd).AsStrSlice()
		return err
	})
	return names, err
}

// Stat describes name: a value's size and modification time, or a
// directory; an error wrapping fs.ErrNotExist for neither.
func (s *Storage) Stat(ctx context.Context, name string) (KeyInfo, error) {
	key := s.valueKey(name)
	var size, ms int64
	var msErr error
	err := s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) (err error) {
		res := dc.DoMulti(ctx, dc.B().Hstrlen().Key(key).Field("v").Build(), dc.B().Hget().Key(key).Field("m").Build())
		if size, err = res[0].AsInt64(); err != nil {
			return err
		}
		ms, msErr = res[1].AsInt64()
		return nil
	})
	if err != nil {
		return KeyInfo{}, err
	}
	if msErr == nil {
		return KeyInfo{Key: name, Modified: time.UnixMilli(ms), Size: size, IsTerminal: true}, nil
	} else if !rueidis.IsRedisNil(msErr) {
		return KeyInfo{}, msErr
	}
	under, err := s.under(ctx, name, 1)
	if err != nil {
		return KeyInfo{}, err
	}
	if len(under) == 0 {
		return KeyInfo{}, fmt.Errorf("cluster: %s: %w", name, fs.ErrNotExist)
	}
	return KeyInfo{Key: name}, nil
}

// Lock takes the lock name, waiting while another node (or another
// caller here) holds it, until ctx is done. The lock lasts until Unlock,
// kept alive meanwhile; a node that dies holding it loses it within
// lockTTL.
func (s *Storage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if ok || err != nil && ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// TryLock takes the lock name if no one holds it, and reports whether it
// did.
func (s *Storage) TryLock(ctx context.Context, name string) (bool, error) {
	s.mu.Lock()
	_, mine := s.held[name]
	s.mu.Unlock()
	if mine {
		return false, nil // held by another caller of this node
	}
	token := newToken()
	err := s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) error {
		return dc.Do(ctx, dc.B().Set().Key(s.lockKey(name)).Value(token).Nx().Px(lockTTL).Build()).Error()
	})
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	h := &heldLock{token: token, stop: make(chan struct{})}
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	s.wg.Add(1)
	go s.refresh(name, h)
	return true, nil
}

// refresh keeps the lock name alive every lockRefresh until it is
// released; one whose Redis key is gone (expired while Redis was away) it
// stops keeping.
func (s *Storage) refresh(name string, h *heldLock) {
	defer s.wg.Done()
	t := time.NewTicker(lockRefresh)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			if err := s.extend(context.Background(), name, h.token, lockTTL); errors.Is(err, errLockLost) {
				return
			}
		}
	}
}

// errLockLost: the lock is no longer the caller's.
var errLockLost = errors.New("cluster: lock lost")

func (s *Storage) extend(ctx context.Context, name, token string, ttl time.Duration) error {
	var n int64
	err := s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) (err error) {
		n, err = eval(ctx, dc, extendScript, []string{s.lockKey(name)}, []string{token, strconv.FormatInt(ttl.Milliseconds(), 10)}).AsInt64()
		return err
	})
	if err == nil && n == 0 {
		err = errLockLost
	}
	return err
}

// RenewLockLease makes the lock name, held here, last lease from now (for
// an order that outlasts lockTTL; the refresher keeps it alive too).
func (s *Storage) RenewLockLease(ctx context.Context, name string, lease time.Duration) error {
	s.mu.Lock()
	h := s.held[name]
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("cluster: lock %q is not held here", name)
	}
	return s.extend(ctx, name, h.token, max(lease, lockTTL))
}

// Unlock releases the lock name, held here.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("cluster: lock %q is not held here", name)
	}
	close(h.stop)
	return s.do(ctx, func(ctx context.Context, dc rueidis.DedicatedClient) error {
		return eval(ctx, dc, unlockScript, []string{s.lockKey(name)}, []string{h.token}).Error() // on failure it expires within lockTTL
	})
}

// Close releases every lock still held here and waits for their
// refreshers to stop. The Client stays open.
func (s *Storage) Close() {
	s.close.Do(func() {
		s.mu.Lock()
		names := make([]string, 0, len(s.held))
		for n := range s.held {
			names = append(names, n)
		}
		s.mu.Unlock()
		for _, n := range names {
			_ = s.Unlock(context.Background(), n)
		}
		s.wg.Wait()
	})
}

// newToken is a lock's token: random, so that only its holder releases it.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
