package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"spillway/store"
)

// Origin is the system of record behind the cache: a read that misses
// everywhere in the cluster loads the key from it, once per key at a time.
type Origin interface {
	// Load returns the item for key, or an error wrapping ErrOriginMiss
	// when the origin has no such key.
	Load(ctx context.Context, key string) (store.Item, error)
}

// OriginFunc adapts a function to Origin.
type OriginFunc func(ctx context.Context, key string) (store.Item, error)

// Load calls f.
func (f OriginFunc) Load(ctx context.Context, key string) (store.Item, error) { return f(ctx, key) }

// ErrOriginMiss reports that the origin does not have the key.
var ErrOriginMiss = errors.New("origin: no such key")

// ParseOrigin makes an Origin from a URL:
//
//	http://host:port/path/{key}   GET; 200 is the value, 404 a miss; Cache-Control max-age sets the TTL
//	file:///dir                   one file per key in dir
//
// maxItemSize bounds what is read from the origin.
func ParseOrigin(raw string, maxItemSize int) (Origin, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("origin %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		if !strings.Contains(raw, "{key}") {
			return nil, fmt.Errorf("origin %q: the URL needs a {key} placeholder", raw)
		}
		return &HTTPOrigin{URL: raw, MaxSize: maxItemSize}, nil
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("origin %q: want file:///absolute/dir", raw)
		}
		return NewFileOrigin(u.Path, maxItemSize)
	}
	return nil, fmt.Errorf("origin %q: want an http://, https:// or file:// URL", raw)
}

// HTTPOrigin loads keys with an HTTP GET.
type HTTPOrigin struct {
	// URL has a {key} placeholder, replaced by the escaped key: in the
	// path, as one path segment (a key that is "." or "..", or holds a
	// control byte, is refused rather than sent); in the query, as one
	// query value.
	URL string
	// MaxSize is the largest body accepted; a larger one is an error.
	MaxSize int
	// Client is the HTTP client. If nil, http.DefaultClient.
	Client *http.Client
	// Now is the clock a max-age counts from: the node's (Config.Now). If
	// nil, time.Now.
	Now func() time.Time
}

// Load implements Origin.
func (o *HTTPOrigin) Load(ctx context.Context, key string) (store.Item, error) {
	u, err := o.url(key)
	if err != nil {
		return store.Item{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return store.Item{}, err
	}
	client := o.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return store.Item{}, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return store.Item{}, ErrOriginMiss
	default:
		return store.Item{}, fmt.Errorf("origin: GET %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(o.MaxSize)+1))
	if err != nil {
		return store.Item{}, err
	}
	if len(body) > o.MaxSize {
		return store.Item{}, fmt.Errorf("origin: %s is larger than the item size limit", u)
	}
	it := store.Item{Key: key, Value: body}
	if ttl, ok := maxAge(resp.Header.Get("Cache-Control")); ok {
		if ttl <= 0 {
			// no-cache or max-age=0: serve it, but keep it as briefly as
			// the clock allows.
			ttl = time.Second
		}
		now := time.Now
		if o.Now != nil {
			now = o.Now
		}
		it.Expires = now().Add(ttl)
	}
	return it, nil
}

// url is o.URL for key: a key can name one resource only, never another
// path or another query parameter.
func (o *HTTPOrigin) url(key string) (string, error) {
	if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("%w: a key with control bytes is not sent to an HTTP origin", errBadOriginKey)
	}
	before, after, _ := strings.Cut(o.URL, "{key}")
	if strings.Contains(before, "?") {
		return before + url.QueryEscape(key) + after, nil
	}
	if key == "." || key == ".." {
		return "", fmt.Errorf("%w: %q would be a relative path", errBadOriginKey, key)
	}
	return strings.ReplaceAll(o.URL, "{key}", url.PathEscape(key)), nil
}

// errBadOriginKey is a key an origin cannot be asked for: a miss.
var errBadOriginKey = fmt.Errorf("%w: the key cannot be asked for", ErrOriginMiss)

// maxAge reads max-age (or no-store / no-cache, as 0) from Cache-Control.
func maxAge(cc string) (time.Duration, bool) {
	for _, d := range strings.Split(cc, ",") {
		d = strings.TrimSpace(strings.ToLower(d))
		switch {
		case d == "no-store" || d == "no-cache":
			return 0, true
		case strings.HasPrefix(d, "max-age="):
			n, err := strconv.ParseInt(strings.TrimPrefix(d, "max-age="), 10, 64)
			if err == nil && n >= 0 {
				return time.Duration(n) * time.Second, true
			}
		}
	}
	return 0, false
}

// FileOrigin loads keys from files in one directory, one file per key, the
// file name being the path-escaped key. Keys cannot reach outside the
// directory: files are opened through an os.Root. Only regular files are
// served, and a load gives up when its context ends, so a FIFO or a hung
// mount costs one read its timeout rather than a fill forever.
type FileOrigin struct {
	root    *os.Root
	maxSize int
}

// NewFileOrigin opens dir as an origin.
func NewFileOrigin(dir string, maxItemSize int) (*FileOrigin, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	return &FileOrigin{root: root, maxSize: maxItemSize}, nil
}

// Load implements Origin.
func (o *FileOrigin) Load(ctx context.Context, key string) (store.Item, error) {
	name := url.PathEscape(key)
	if name == "." || name == ".." {
		return store.Item{}, ErrOriginMiss
	}
	type result struct {
		it  store.Item
		err error
	}
	// A read blocked in the kernel (a hung mount) cannot be interrupted:
	// the load returns when ctx ends, and the goroutine when the kernel
	// lets it.
	done := make(chan result, 1)
	go func() {
		it, err := o.read(key, name)
		done <- result{it, err}
	}()
	select {
	case r := <-done:
		return r.it, r.err
	case <-ctx.Done():
		return store.Item{}, ctx.Err()
	}
}

func (o *FileOrigin) read(key, name string) (store.Item, error) {
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer. It changes nothing for a regular file.
	f, err := o.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return store.Item{}, ErrOriginMiss
	}
	if err != nil {
		return store.Item{}, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return store.Item{}, err
	} else if !fi.Mode().IsRegular() {
		return store.Item{}, fmt.Errorf("origin: %q is not a regular file", name)
	}
	body, err := io.ReadAll(io.LimitReader(f, int64(o.maxSize)+1))
	if err != nil {
		return store.Item{}, err
	}
	if len(body) > o.maxSize {
		return store.Item{}, fmt.Errorf("origin: file for %q is larger than the item size limit", key)
	}
	return store.Item{Key: key, Value: body}, nil
}

// Close releases the directory.
func (o *FileOrigin) Close() error { return o.root.Close() }
