package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/edgerate/edge/proxy"
)

// configHash identifies configuration bytes.
func configHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// reloader reloads the configuration on SIGHUP and when the file changes.
//
// Changes are found by polling rather than with inotify: a poll sees every
// way a file can be replaced (written in place, renamed over, or swapped
// behind a symlink as Kubernetes does with ConfigMaps, where an inotify
// watch on the file stays on the old inode) and needs nothing but os.Stat.
// A change of size, modification time or inode prompts a read; the content
// hash decides whether anything really changed.
type reloader struct {
	path     string // "" for the embedded default: SIGHUP only, nothing to watch
	interval time.Duration
	proxy    *proxy.Proxy
	log      *slog.Logger

	mu       sync.Mutex // serialises reloads from the signal and the poll
	lastStat fileStamp
	lastHash string
	lastErr  string // the last failed reload's problems, "" after a success
}

type fileStamp struct {
	size    int64
	modTime time.Time
	ino     uint64
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), modTime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

// run watches until ctx is done. It returns when ctx is done, having
// stopped its signal notification.
func (rl *reloader) run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if rl.path != "" && rl.interval > 0 {
		t := time.NewTicker(rl.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			rl.log.Info("SIGHUP: reloading configuration")
			rl.reload(true)
		case <-tick:
			rl.reload(false)
		}
	}
}

// reload loads the file and, if it changed (or force), applies it. An
// invalid file leaves the running configuration in place and is reported
// once per distinct content.
func (rl *reloader) reload(force bool) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.path != "" && !force {
		fi, err := os.Stat(rl.path)
		if err != nil || stampOf(fi) == rl.lastStat {
			return
		}
		rl.lastStat = stampOf(fi)
	}
	data, err := readConfig(rl.path)
	if err != nil {
		rl.failed(err, "")
		return
	}
	hash := configHash(data)
	if hash == rl.lastHash && !force {
		return
	}
	table, err := parseConfig(data)
	if err != nil {
		rl.failed(err, hash)
		return
	}
	res, err := rl.proxy.Reload(table, hash)
	if err != nil {
		rl.failed(err, hash)
		return
	}
	rl.lastHash, rl.lastErr = hash, ""
	rl.log.Info("configuration reloaded", "hash", hash[:12],
		"domains_added", res.DomainsAdded, "domains_removed", res.DomainsRemoved,
		"rules_added", res.RulesAdded, "rules_removed", res.RulesRemoved,
		"rules_kept", len(res.RulesKept), "rules_changed", res.RulesChanged,
		"rules_reset", res.RulesReset, "keys_carried", res.KeysCarried)
	if len(res.RestartRequired) > 0 {
		rl.log.Warn("some changed settings take effect only after a restart", "settings", res.RestartRequired)
	}
}

// failed reports a reload that could not be applied. Caller holds rl.mu.
func (rl *reloader) failed(err error, hash string) {
	if hash != "" {
		rl.lastHash = hash // do not retry the same broken content every poll
	}
	rl.lastErr = indent(err)
	rl.proxy.ReloadFailed(err)
	rl.log.Error("configuration reload failed; the running configuration stays",
		"path", describe(rl.path), "problems", "\n"+rl.lastErr)
}

// status is what /readyz and /v1/config say about reloads.
func (rl *reloader) status() map[string]any {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	st := map[string]any{"config_path": describe(rl.path), "last_reload_ok": rl.lastErr == ""}
	if rl.lastErr != "" {
		st["last_reload_error"] = rl.lastErr
	}
	return st
}
