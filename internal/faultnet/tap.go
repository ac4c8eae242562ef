package faultnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// tap is an emulated link: two TAP devices, the guest's (moved into the
// host's namespace as eth0) and the host side (on the bridge), with this
// process copying frames between them. Frames the guest sends can be
// delayed and dropped, like tc netem on the guest's interface; frames to
// the guest pass as they come.
type tap struct {
	guest, host device
	params      atomic.Pointer[impairment]
	sent        atomic.Uint64 // frames the guest sent
	dropped     atomic.Uint64 // of which dropped
	wg          sync.WaitGroup
	stop        chan struct{}
	closeOnce   sync.Once
}

type impairment struct {
	delay time.Duration
	loss  float64
}

type device struct {
	name string
	f    *os.File
}

// newTap creates both devices in this namespace; the caller moves the
// guest's. A TAP device lives as long as its file is open, so closing the
// files removes them, wherever they are.
func newTap(guest, host string) (*tap, error) {
	g, err := openTap(guest)
	if err != nil {
		return nil, err
	}
	h, err := openTap(host)
	if err != nil {
		g.f.Close()
		return nil, err
	}
	t := &tap{guest: g, host: h, stop: make(chan struct{})}
	t.params.Store(&impairment{})
	return t, nil
}

func openTap(name string) (device, error) {
	fd, err := syscall.Open("/dev/net/tun", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return device{}, fmt.Errorf("faultnet: open /dev/net/tun: %w", err)
	}
	req, err := unix.NewIfreq(name)
	if err == nil {
		req.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, req)
	}
	if err != nil {
		syscall.Close(fd)
		return device{}, fmt.Errorf("faultnet: create TAP device %s: %w", name, err)
	}
	// Non-blocking, so that the runtime poller serves reads and Close
	// interrupts them.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return device{}, err
	}
	return device{name: name, f: os.NewFile(uintptr(fd), name)}, nil
}

func (t *tap) impair(delay time.Duration, loss float64) {
	t.params.Store(&impairment{delay: delay, loss: loss})
}

// start copies frames both ways until close.
func (t *tap) start() {
	t.wg.Go(func() { t.copy(t.host, t.guest, false) })
	out := make(chan frame, 4096)
	t.wg.Go(func() { t.copy(t.guest, t.host, true, out) })
	t.wg.Go(func() { t.deliver(out) })
}

type frame struct {
	due  time.Time
	data []byte
}

// copy reads frames from src. Frames to the guest are written to dst at
// once; the guest's go through the impairment and out to deliver.
func (t *tap) copy(src, dst device, impaired bool, out ...chan frame) {
	if impaired {
		defer close(out[0])
	}
	buf := make([]byte, 65536)
	for {
		n, err := src.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			select {
			case <-t.stop:
				return
			default:
			}
			time.Sleep(time.Millisecond) // a transient error; do not spin on it
			continue
		}
		if !impaired {
			_, _ = dst.f.Write(buf[:n])
			continue
		}
		t.sent.Add(1)
		p := t.params.Load()
		if p.loss > 0 && rand.Float64() < p.loss {
			t.dropped.Add(1)
			continue
		}
		if p.delay == 0 {
			_, _ = dst.f.Write(buf[:n])
			continue
		}
		f := frame{due: time.Now().Add(p.delay), data: append([]byte(nil), buf[:n]...)}
		select {
		case out[0] <- f:
		default: // the queue is full: drop, as a full netem queue does
			t.dropped.Add(1)
		}
	}
}

// deliver writes delayed frames to the host side when they are due. The
// delay is the same for all frames queued under one setting, so they come
// due in order.
func (t *tap) deliver(in <-chan frame) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for f := range in {
		if wait := time.Until(f.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-t.stop:
				return
			}
		}
		_, _ = t.host.f.Write(f.data)
	}
}

func (t *tap) close() {
	t.closeOnce.Do(func() {
		close(t.stop)
		t.guest.f.Close()
		t.host.f.Close()
		t.wg.Wait()
	})
}
