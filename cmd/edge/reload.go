package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/edgerate/edge/acme"
	"github.com/edgerate/edge/certs"
	"github.com/edgerate/edge/config"
	"github.com/edgerate/edge/proxy"
	"github.com/edgerate/edge/rls"
	"github.com/edgerate/edge/rules"
)

// reloader reloads the configuration on SIGHUP and when the file changes.
//
// Changes are found by polling rather than with inotify: a poll sees every
// way a file can be replaced (written in place, renamed over, or swapped
// behind a symlink as Kubernetes does with ConfigMaps, where an inotify
// watch on the file stays on the old inode) and needs nothing but os.Stat.
// A change of size, modification time or inode prompts a read; the content
// hash decides whether anything really changed.
type reloader struct {
	path     string   // "" for the embedded default: SIGHUP only, nothing to watch
	env      []string // the environment whose settings go over the file's
	interval time.Duration
	proxy    *proxy.Proxy
	log      *slog.Logger
	// applied, if set, is called with each configuration a reload
	// applies, before the reload is logged.
	applied func(*rules.Table)

	// rls, if set, is the rate limit service: each reload also reloads
	// the Lyft files the rls section names, and a change to any of them
	// is a change of the configuration.
	rls *rls.Service

	// tls, if set, serves the HTTPS listener: each reload also reloads
	// the certificates, and a change to any of their files is a change of
	// the configuration.
	tls *certs.Server

	// acme, if set, obtains the certificates of tls.acme: each reload
	// gives it the names of the domains with acme: true.
	acme *acme.Manager

	mu       sync.Mutex // serialises reloads from the signal and the poll
	lastStat fileStamp
	lastHash string
	lastRLS  []fileStamp  // rlsStamp of the last configuration read
	rlsOf    *rules.Table // the last configuration read: its Lyft files are watched
	// lastCerts is certificateStamp of the last configuration read.
	lastCerts []fileStamp
	// lastKeys is keyFileStamp of the last configuration read, taken as
	// the files were read.
	lastKeys []fileStamp
	// lastOriginTLS is originTLSStamp of the last configuration read.
	lastOriginTLS []fileStamp
}

// originTLSStamp stamps the files of t's origin_tls sections (t read from
// path): a change to one (a renewed client certificate) is a change of
// the configuration.
func originTLSStamp(path string, t *rules.Table) []fileStamp {
	if t == nil {
		return nil
	}
	var out []fileStamp
	stamp := func(up *rules.Upstream) {
		if up == nil || up.TLS == nil {
			return
		}
		ot := up.TLS
		for _, f := range []string{ot.CAFile, ot.ClientCertFile, ot.ClientKeyFile} {
			if f == "" {
				continue
			}
			st := fileStamp{}
			if fi, err := os.Stat(config.KeyFilePath(path, f)); err == nil {
				st = stampOf(fi)
			}
			out = append(out, st)
		}
	}
	for _, d := range t.Domains {
		for _, r := range d.Routes { // a route's origin_tls, its own or the domain's
			stamp(r.Upstream)
		}
		stamp(d.Upstream)
	}
	return out
}

// keyFileStamp stamps the API key files (domains' api_keys.file) of t, the
// configuration at path: a change to one is a change of the
// configuration.
func keyFileStamp(path string, t *rules.Table) []fileStamp {
	if t == nil {
		return nil
	}
	var out []fileStamp
	for _, d := range t.Domains {
		if d.APIKeys == nil || d.APIKeys.File == "" {
			continue
		}
		st := fileStamp{}
		if fi, err := os.Stat(config.KeyFilePath(path, d.APIKeys.File)); err == nil {
			st = stampOf(fi)
		}
		out = append(out, st)
	}
	return out
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

// newReloader returns the reloader of the configuration at path, with the
// settings of env over it, whose content with the given hash p runs; p
// keeps how reloads stand. Each configuration it applies sets level to its
// log.level and warns if it leaves the admin listener exposed or holds a
// weak secret, and of the variables of env that name no setting.
func newReloader(path, hash string, env []string, p *proxy.Proxy, log *slog.Logger, level *slog.LevelVar) *reloader {
	rl := &reloader{path: path, env: env, interval: time.Second, proxy: p, log: log, lastHash: hash}
	adminListen := p.Table().AdminListen // a reload does not move the listener
	rl.applied = func(t *rules.Table) {
		level.Set(t.LogLevel)
		warnIfAdminExposed(log, t, adminListen)
		warnWeakSecrets(log, t)
		warnEnv(log, env)
	}
	if path != "" {
		if fi, err := os.Stat(path); err == nil {
			rl.lastStat = stampOf(fi)
		}
	}
	rl.rlsOf = p.Table()
	rl.lastRLS = rlsStamp(path, rl.rlsOf)
	rl.lastCerts = certificateStamp(path, rl.rlsOf)
	rl.lastKeys = keyFileStamp(path, rl.rlsOf)
	rl.lastOriginTLS = originTLSStamp(path, rl.rlsOf)
	return rl
}

// run watches until ctx is done. It returns when ctx is done, having
// stopped its signal notification.
func (rl *reloader) run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGUSR1 reopens the access log, as logrotate's postrotate asks
	// (nginx's signal for it too).
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
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
		case <-usr1:
			rl.log.Info("SIGUSR1: reopening the access log")
			rl.proxy.ReopenAccessLog()
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
	// The Lyft files watched are those the last file read names, applied
	// or not, so that a broken one is reported once, not on every poll.
	rlsSame := rl.rls == nil || slices.Equal(rlsStamp(rl.path, rl.rlsOf), rl.lastRLS)
	rlsSame = rlsSame && (rl.tls == nil || slices.Equal(certificateStamp(rl.path, rl.rlsOf), rl.lastCerts))
	keys := keyFileStamp(rl.path, rl.rlsOf)
	rlsSame = rlsSame && slices.Equal(keys, rl.lastKeys)
	rl.lastKeys = keys // a broken key file is read again when it changes, not on every poll
	tlsFiles := originTLSStamp(rl.path, rl.rlsOf)
	rlsSame = rlsSame && slices.Equal(tlsFiles, rl.lastOriginTLS)
	rl.lastOriginTLS = tlsFiles
	if rl.path != "" && !force {
		fi, err := os.Stat(rl.path)
		if err != nil || (stampOf(fi) == rl.lastStat && rlsSame) {
			return
		}
		rl.lastStat = stampOf(fi)
	}
	data, err := config.Read(rl.path)
	if err != nil {
		rl.failed(err, "")
		return
	}
	hash := config.Hash(data)
	if hash == rl.lastHash && !force && rlsSame {
		return
	}
	table, err := config.ParseAt(rl.path, data, rl.env)
	if err != nil {
		rl.failed(err, hash)
		return
	}
	// What fails from here on fails with a parsed file: its problems
	// pass through its secrets too.
	rl.rlsOf, rl.lastRLS, rl.lastCerts = table, rlsStamp(rl.path, table), certificateStamp(rl.path, table)
	rl.lastKeys = keyFileStamp(rl.path, table)
	rl.lastOriginTLS = originTLSStamp(rl.path, table)
	var rc *rls.Config
	if rl.rls != nil {
		if rc, err = loadRLS(rl.path, table); err != nil {
			rl.failed(table.Secrets.RedactError(err), hash)
			return
		}
	}
	var certSet *certs.Set
	if rl.tls != nil {
		// A file without tls.listen keeps the running certificates: the
		// listener stays until a restart.
		if certSet, err = loadCertificates(rl.path, table); err != nil {
			rl.failed(table.Secrets.RedactError(err), hash)
			return
		}
	}
	res, err := rl.proxy.Reload(table, hash)
	if err != nil {
		rl.failed(table.Secrets.RedactError(err), hash)
		return
	}
	if rc != nil {
		if err := rl.rls.Reload(table, rc); err != nil {
			rl.failed(table.Secrets.RedactError(err), hash)
			return
		}
		warnRLS(rl.log, rc)
	}
	if rl.acme != nil && table.TLS.ACME != nil {
		rl.acme.Manage(table.TLS.ACME.Names) // a file without tls.acme keeps the running names: a restart removes them
	}
	if certSet != nil {
		rl.tls.Swap(certSet)
		rl.proxy.SetCertificates(certSet.Info())
		warnCertificates(rl.log, certSet)
	}
	rl.lastHash = hash
	if rl.applied != nil {
		rl.applied(table)
	}
	rl.log.Info("configuration reloaded", "hash", hash[:12],
		"domains_added", res.DomainsAdded, "domains_removed", res.DomainsRemoved,
		"rules_added", res.RulesAdded, "rules_removed", res.RulesRemoved,
		"rules_kept", len(res.RulesKept), "rules_changed", res.RulesChanged,
		"rules_reset", res.RulesReset, "keys_carried", res.KeysCarried)
	if len(res.RestartRequired) > 0 {
		rl.log.Warn("the running values of these settings differ from the file's and stay until a restart",
			"restart_required", res.RestartRequired)
	}
}

// failed reports a reload that could not be applied. Caller holds rl.mu.
func (rl *reloader) failed(err error, hash string) {
	if hash != "" {
		rl.lastHash = hash // do not retry the same broken content every poll
	}
	rl.proxy.ReloadFailed(err)
	rl.log.Error("configuration reload failed; the running configuration stays",
		"path", describe(rl.path), "problems", "\n"+rules.ProblemText(err))
}
