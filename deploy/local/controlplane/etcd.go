package controlplane

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/epwindow/epwindow/deploy/local/internal/freeport"
)

// startEtcd runs a single-member etcd inside this process, on loopback ports
// picked free just before use. A freed port can be taken by someone else
// before etcd binds it, so "address already in use" is retried with new ports.
func startEtcd(dir, logFile string) (*embed.Etcd, string, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := freeport.Loopback(2)
		if err != nil {
			return nil, "", err
		}
		client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
		peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}

		cfg := embed.NewConfig()
		cfg.Name = "epwindow-local"
		cfg.Dir = filepath.Join(dir, fmt.Sprintf("etcd-%d", attempt))
		cfg.ListenClientUrls = []url.URL{client}
		cfg.AdvertiseClientUrls = []url.URL{client}
		cfg.ListenPeerUrls = []url.URL{peer}
		cfg.AdvertisePeerUrls = []url.URL{peer}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.LogOutputs = []string{logFile}
		cfg.LogLevel = "warn"
		// The data lives as long as the process: durability buys nothing.
		cfg.UnsafeNoFsync = true

		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			if strings.Contains(err.Error(), "address already in use") {
				continue
			}
			return nil, "", fmt.Errorf("start etcd: %w", err)
		}
		select {
		case <-e.Server.ReadyNotify():
			return e, client.String(), nil
		case err := <-e.Err():
			e.Close()
			return nil, "", fmt.Errorf("etcd failed while starting: %w", err)
		case <-time.After(30 * time.Second):
			e.Close()
			return nil, "", errors.New("etcd not ready after 30s (see etcd.log)")
		}
	}
	return nil, "", fmt.Errorf("start etcd: %w", lastErr)
}
