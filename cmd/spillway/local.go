package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"spillway/bench"
	"spillway/peers"
	"spillway/ring"
	"spillway/server"
	"spillway/store"
)

// localCluster is an embedded cluster of nodes on loopback ports, for
// "spillway bench --local N".
type localCluster struct {
	nodes []*server.Server
	addrs []string
}

// startLocal starts n nodes gossiping on 127.0.0.1 and waits until each
// sees all of them.
func startLocal(n int, f benchFlags, log *slog.Logger) (*localCluster, error) {
	lc := &localCluster{}
	pick, err := pickerConfig(f.epsilon, f.load, f.spillOrder)
	if err != nil {
		return nil, err
	}
	// The embedded origin answers every key after a delay; the nodes'
	// origin_fetches stats count its calls.
	var origin server.Origin
	if f.originLatency > 0 {
		size, _ := bench.ParseSize(f.valueSize)
		origin = server.OriginFunc(func(ctx context.Context, key string) (store.Item, error) {
			t := time.NewTimer(f.originLatency)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return store.Item{}, ctx.Err()
			}
			return store.Item{Key: key, Value: bench.OriginValue(key, size.Min)}, nil
		})
	}
	var seed string
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			lc.close()
			return nil, err
		}
		pln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ln.Close()
			lc.close()
			return nil, err
		}
		name := fmt.Sprintf("node%d", i)
		pc := peers.Config{
			Name:     name,
			BindAddr: "127.0.0.1",
			Profile:  peers.Local,
			Logger:   log.With("self", name),
			Meta:     peers.Meta{Client: ln.Addr().String(), Peer: pln.Addr().String(), Weight: 1},
		}
		if seed != "" {
			pc.Join = []string{seed}
		}
		srv, err := server.New(server.Config{
			MaxBytes: f.localMemory,
			Logger:   pc.Logger,
			Origin:   origin,
			Cluster: &server.ClusterConfig{
				Peers:   pc,
				Picker:  pick,
				CopyTTL: f.copyTTL,
			},
		})
		if err != nil {
			ln.Close()
			pln.Close()
			lc.close()
			return nil, err
		}
		if seed == "" {
			seed = srv.GossipAddr()
		}
		go srv.Serve(ln)
		go srv.ServePeers(pln)
		lc.nodes = append(lc.nodes, srv)
		lc.addrs = append(lc.addrs, ln.Addr().String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for !lc.converged() {
		if time.Now().After(deadline) {
			lc.close()
			return nil, errors.New("local cluster did not converge within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return lc, nil
}

func (lc *localCluster) converged() bool {
	for _, s := range lc.nodes {
		if s.ClusterSize() != len(lc.nodes) {
			return false
		}
	}
	return true
}

func (lc *localCluster) close() {
	for _, s := range lc.nodes {
		s.Close()
	}
}

// runLocal runs the benchmark against a fresh embedded cluster.
func runLocal(ctx context.Context, f benchFlags, cfg bench.Config, stderr io.Writer) (*bench.Report, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lc, err := startLocal(f.local, f, log)
	if err != nil {
		return nil, err
	}
	defer lc.close()
	cfg.Servers = lc.addrs
	rep, err := bench.Run(ctx, cfg)
	return rep, err
}

// pickerConfig turns the --epsilon, --load and --spill-order flags into a
// ring.PickerConfig.
func pickerConfig(epsilon float64, load, order string) (ring.PickerConfig, error) {
	pick := ring.PickerConfig{Epsilon: epsilon}
	switch load {
	case "rate":
		pick.Load = ring.Rate
	case "inflight":
		pick.Load = ring.InFlight
	default:
		return pick, fmt.Errorf("--load: want rate or inflight, not %q", load)
	}
	switch order {
	case "ring":
		pick.Order = ring.RingWalk
	case "probe":
		pick.Order = ring.Probe
	default:
		return pick, fmt.Errorf("--spill-order: want ring or probe, not %q", order)
	}
	return pick, nil
}
