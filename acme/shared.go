package acme

import (
	"context"

	"github.com/caddyserver/certmagic"
	"github.com/edgerate/edge/cluster"
)

// sharedStorage is the PoP's ACME state in Redis (cluster.Storage) as
// certmagic's Storage, with its TryLocker and LockLeaseRenewer: one node
// orders under a lock while the others wait, and finds the certificate in
// storage once the lock is released.
type sharedStorage struct{ *cluster.Storage }

func (s sharedStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	i, err := s.Storage.Stat(ctx, key)
	return certmagic.KeyInfo{Key: i.Key, Modified: i.Modified, Size: i.Size, IsTerminal: i.IsTerminal}, err
}

var (
	_ certmagic.Storage          = sharedStorage{}
	_ certmagic.TryLocker        = sharedStorage{}
	_ certmagic.LockLeaseRenewer = sharedStorage{}
)
