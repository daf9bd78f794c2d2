package upstream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// maxBody bounds one payload read (a big cluster's Skipper route table or
// Envoy cluster dump runs to megabytes; more than this is a wrong URL).
const maxBody = 64 << 20

// httpObserver polls one HTTP endpoint per controller replica and parses the
// payload with a pure function.
type httpObserver struct {
	kind     string
	path     string // appended to a replica's base URL (may carry a query)
	accept   string
	parse    func([]byte) ([]netip.AddrPort, error)
	settings func(args [][]string) map[string]string
	src      source
	client   *http.Client
	interval time.Duration
	timeout  time.Duration // bounds a version read
	clock    clock.PassiveClock

	// named, when set, are read at each poll instead of path: the exact
	// objects of the Target on the replica's API root (Traefik's services
	// by name), so a poll costs the same on a 10,000-route controller as on
	// a 10-route one. parseOne reads one object; a 404 that absent
	// recognises means the controller holds no such object now (listing
	// nothing), while any other 404 (a wrong URL) makes the reading blind.
	named    []string
	parseOne func([]byte) ([]netip.AddrPort, error)
	absent   func(body []byte) bool
	// bodyBudget bounds one payload; zero means maxBody.
	bodyBudget int64

	// versionPath is the controller's own version endpoint, read from each
	// replica's origin when no image tag tells the version (replicas given
	// by --observer-url); versionOf decodes its payload. Empty: none.
	versionPath string
	versionOf   func([]byte) (string, error)
	versionOnce sync.Once
	apiVersion  string
}

func (o *httpObserver) Name() string              { return o.kind }
func (o *httpObserver) Resolution() time.Duration { return o.interval }
func (o *httpObserver) Close() error              { return o.src.close() }

func (o *httpObserver) Settings(ctx context.Context) map[string]string {
	if o.settings == nil {
		return nil
	}
	cs := o.src.containers(ctx)
	if cs == nil {
		return nil
	}
	args := make([][]string, len(cs))
	for i, c := range cs {
		args[i] = append(slices.Clone(c.Command), c.Args...)
	}
	return o.settings(args)
}

// Version is the controller's version as its replicas' images tag it
// ("v1.11.2"; distinct tags joined with ", " mid-upgrade). When no image
// tells it (replicas given as URLs, or untagged images) and the controller
// has a version endpoint, it is what that endpoint reports, read once;
// else "".
func (o *httpObserver) Version(ctx context.Context) string {
	if tags := imageTags(o.src.containers(ctx)); tags != "" || o.versionPath == "" {
		return tags
	}
	o.versionOnce.Do(func() { o.apiVersion = o.readVersion(ctx) })
	return o.apiVersion
}

// imageTags are the distinct tags of the containers' images, in order,
// joined with ", " (several mid-upgrade); "" when none is tagged.
func imageTags(cs []corev1.Container) string {
	var tags []string
	for _, c := range cs {
		if t := imageTag(c.Image); t != "" && !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	return strings.Join(tags, ", ")
}

// readVersion asks every replica's version endpoint, each under the poll
// timeout. A replica that does not answer is left out: the version is a
// label in the results header, and nothing is worth failing a run for it.
func (o *httpObserver) readVersion(ctx context.Context) string {
	eps, err := o.src.endpoints(ctx)
	if err != nil {
		return ""
	}
	var vs []string
	for _, ep := range eps {
		if ep.Err != nil {
			continue
		}
		if v := o.readVersionAt(ctx, versionURL(ep.BaseURL, o.versionPath)); v != "" && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	return strings.Join(vs, ", ")
}

func (o *httpObserver) readVersionAt(ctx context.Context, u string) string {
	if u == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ""
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	v, err := o.versionOf(body)
	if err != nil {
		return ""
	}
	return v
}

// versionURL puts path on a replica URL's origin, keeping whatever prefix
// comes before the URL's own "/api/" (Traefik's API behind a path prefix:
// "http://h/traefik/api/http/services" → "http://h/traefik/api/version").
func versionURL(base, path string) string {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return ""
	}
	prefix := ""
	if i := strings.LastIndex(u.Path, "/api/"); i >= 0 {
		prefix = u.Path[:i]
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = prefix+path, "", "", ""
	return u.String()
}

// imageTag is an image reference's tag, or its digest when it has no tag:
// "registry:5000/ingress-nginx/controller:v1.11.2@sha256:…" → "v1.11.2".
func imageTag(ref string) string {
	name, digest, _ := strings.Cut(ref, "@")
	// A tag follows the last colon after the last slash (a colon before it
	// belongs to the registry's port).
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	return digest
}

// requestURL is the replica's base URL with the observer's path, unless the
// user's URL already names a path (e.g. Skipper's ".../routes"). A URL that
// names the observer's own path without a query gets the observer's query:
// Skipper serves http://h:9911/routes in pages of 1,024 routes unless told
// a limit, so on a big table the probe's routes would be on a page never
// read and the run would wait for them in vain.
func (o *httpObserver) requestURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	if u.Path == "" || u.Path == "/" {
		return strings.TrimRight(base, "/") + o.path
	}
	path, query, _ := strings.Cut(o.path, "?")
	if query != "" && u.RawQuery == "" && strings.TrimRight(u.Path, "/") == path {
		u.Path, u.RawQuery = path, query
		return u.String()
	}
	return base
}

func (o *httpObserver) Poll(ctx context.Context) (Snapshot, error) {
	return pollReplicas(ctx, o.kind, o.clock, o.src, o.read)
}

// pollReplicas reads every replica of src at once, each with read; a
// replica the source could not reach is a blind reading.
func pollReplicas(ctx context.Context, kind string, clk clock.PassiveClock, src source, read func(context.Context, endpoint) ReplicaUpstreams) (Snapshot, error) {
	snap := Snapshot{Sent: clk.Now()}
	eps, err := src.endpoints(ctx)
	if err != nil {
		snap.At = clk.Now()
		return snap, fmt.Errorf("%s observer: %w", kind, err)
	}
	snap.Replicas = make([]ReplicaUpstreams, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		if ep.Err != nil {
			now := clk.Now()
			snap.Replicas[i] = ReplicaUpstreams{Replica: ep.Replica, Err: ep.Err, Sent: now, At: now}
			continue
		}
		wg.Go(func() { snap.Replicas[i] = read(ctx, ep) })
	}
	wg.Wait()
	snap.At = clk.Now()
	return snap, nil
}

// read fetches and parses one replica's payload; At is stamped when the whole
// body has arrived, before parsing. With named paths it reads each object
// one after another (Sent before the first, At after the last) and lists
// the union: the controller's view lies somewhere in that bracket.
func (o *httpObserver) read(ctx context.Context, ep endpoint) ReplicaUpstreams {
	r := ReplicaUpstreams{Replica: ep.Replica}
	hint := ""
	if ep.Hint != "" {
		hint = " (" + ep.Hint + ")"
	}
	r.Sent = o.clock.Now()
	if len(o.named) > 0 {
		r.Upstreams, r.Bytes, r.Err = o.readNamed(ctx, ep, hint)
		r.At = o.clock.Now()
		return r
	}
	u := o.requestURL(ep.BaseURL)
	body, status, err := o.get(ctx, u)
	r.At = o.clock.Now()
	r.Bytes = int64(len(body))
	switch {
	case err != nil:
		r.Err = fmt.Errorf("%s replica %s: GET %s: %w%s", o.kind, ep.Replica, u, err, hint)
		return r
	case status != http.StatusOK:
		r.Err = fmt.Errorf("%s replica %s: GET %s: %d %s: %s%s", o.kind, ep.Replica, u, status, http.StatusText(status), firstLine(body), hint)
		return r
	}
	r.Upstreams, err = o.parse(body)
	if err != nil {
		r.Err = fmt.Errorf("%s replica %s: %w", o.kind, ep.Replica, err)
	}
	return r
}

// readNamed reads each of o.named on the replica's API root and merges what
// they list. An object the controller does not have (absent) lists nothing;
// any other failure makes the whole reading blind.
func (o *httpObserver) readNamed(ctx context.Context, ep endpoint, hint string) ([]netip.AddrPort, int64, error) {
	var out []netip.AddrPort
	var n int64
	for _, p := range o.named {
		u := versionURL(ep.BaseURL, p)
		if u == "" {
			return nil, n, fmt.Errorf("%s replica %s: %q is not a URL with a host", o.kind, ep.Replica, ep.BaseURL)
		}
		body, status, err := o.get(ctx, u)
		n += int64(len(body))
		switch {
		case err != nil:
			return nil, n, fmt.Errorf("%s replica %s: GET %s: %w%s", o.kind, ep.Replica, u, err, hint)
		case status == http.StatusNotFound && o.absent != nil && o.absent(body):
			continue
		case status != http.StatusOK:
			return nil, n, fmt.Errorf("%s replica %s: GET %s: %d %s: %s%s", o.kind, ep.Replica, u, status, http.StatusText(status), firstLine(body), hint)
		}
		ups, err := o.parseOne(body)
		if err != nil {
			return nil, n, fmt.Errorf("%s replica %s: GET %s: %w", o.kind, ep.Replica, u, err)
		}
		out = append(out, ups...)
	}
	return dedup(out), n, nil
}

// get reads one payload within the body budget (maxBody): a payload past
// it is an error that says so, never a silently cut table.
func (o *httpObserver) get(ctx context.Context, u string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	if o.accept != "" {
		req.Header.Set("Accept", o.accept)
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	budget := o.bodyBudget
	if budget <= 0 {
		budget = maxBody
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, budget+1))
	if err != nil {
		return body, resp.StatusCode, err
	}
	if int64(len(body)) > budget {
		return body, resp.StatusCode, fmt.Errorf("payload over the observer's %d-byte budget: point --%s at a narrower endpoint or use --%s %s",
			budget, FlagObserverURL, FlagObserver, KindCmd)
	}
	return body, resp.StatusCode, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// cmdObserver runs a shell command at each poll that prints the upstream
// addresses, one a line (--upstreams-cmd).
type cmdObserver struct {
	command  string
	timeout  time.Duration
	interval time.Duration
	clock    clock.PassiveClock
}

func (o *cmdObserver) Name() string                                   { return KindCmd }
func (o *cmdObserver) Resolution() time.Duration                      { return o.interval }
func (o *cmdObserver) Settings(ctx context.Context) map[string]string { return nil }
func (o *cmdObserver) Close() error                                   { return nil }

// Poll runs the command once under the timeout; its process group is killed
// when the timeout passes, so a hung CLI cannot pile up behind the ticker.
func (o *cmdObserver) Poll(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "/bin/sh", "-c", o.command)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	r := ReplicaUpstreams{Replica: "cmd"}
	r.Sent = o.clock.Now()
	err := c.Run()
	r.At = o.clock.Now()
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		r.Err = fmt.Errorf("--%s did not finish within %s: %s", FlagUpstreamsCmd, o.timeout, firstLine(stderr.Bytes()))
	case err != nil:
		r.Err = fmt.Errorf("--%s %q: %w: %s", FlagUpstreamsCmd, o.command, err, firstLine(stderr.Bytes()))
	default:
		r.Upstreams, err = upstreamsFromLines(stdout.Bytes())
		if err != nil {
			r.Err = fmt.Errorf("--%s output: %w", FlagUpstreamsCmd, err)
		}
	}
	return Snapshot{Sent: r.Sent, At: r.At, Replicas: []ReplicaUpstreams{r}}, nil
}

// noneObserver observes nothing: slice and probe stages only.
type noneObserver struct{}

func (noneObserver) Name() string                               { return KindNone }
func (noneObserver) Resolution() time.Duration                  { return 0 }
func (noneObserver) Settings(context.Context) map[string]string { return nil }
func (noneObserver) Poll(context.Context) (Snapshot, error)     { return Snapshot{}, nil }
func (noneObserver) Close() error                               { return nil }

// settingsFromArgs reports one controller flag across replicas: the value,
// or "<default> (default)" when no replica sets it; differing values are
// joined with ",".
func settingsFromArgs(args [][]string, key, flag, def string) map[string]string {
	var vals []string
	for _, a := range args {
		v, ok := argValue(a, flag)
		if !ok {
			v = def + " (default)"
		}
		if len(vals) == 0 || !contains(vals, v) {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return nil
	}
	return map[string]string{key: strings.Join(vals, ",")}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
