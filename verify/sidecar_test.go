package verify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"

	"github.com/epwindow/epwindow/deploy"
	"github.com/epwindow/epwindow/measure/load"
	"github.com/epwindow/epwindow/probe"
	"github.com/epwindow/epwindow/sidecar"
)

const (
	nodeIP    = "192.0.2.7"
	ingressIP = "10.244.0.1"
)

func ptr[T any](v T) *T { return &v }

// record is a sidecar record on a clock offset ahead of the tool's: the
// peers' last accept and request, at ms after t0 on the tool's clock.
func record(offset time.Duration, peers ...sidecar.Peer) *sidecar.Timeline {
	tl := &sidecar.Timeline{Version: sidecar.TimelineVersion, Ports: []uint16{8080}, Peers: peers,
		Poll: sidecar.Poll{IntervalNS: int64(10 * time.Millisecond), MaxGapNS: int64(12 * time.Millisecond)}}
	for i := range tl.Peers {
		p := &tl.Peers[i]
		for _, ts := range []**time.Time{&p.LastAccept, &p.LastRequest} {
			if *ts != nil {
				*ts = ptr((*ts).Add(offset))
			}
		}
	}
	return tl
}

// peer is a peer whose last accept and request are at ms after t0, tool
// clock (0: none).
func peer(addr string, acceptMS, requestMS int) sidecar.Peer {
	p := sidecar.Peer{Addr: addr, Accepts: 1}
	if acceptMS != 0 {
		p.LastAccept = ptr(at(acceptMS))
	}
	if requestMS != 0 {
		p.LastRequest = ptr(at(requestMS))
	}
	return p
}

// TestPodWindow: a replaced pod's window is its last traffic from any peer
// but the node's (the kubelet's probes), corrected to the tool's clock,
// from its deletion; a floor when the app stopped listening while still
// ready in the slices, when requests to it failed, or when only a pod-proxy
// read (not the final record) was had; unreadable, with why, otherwise.
func TestPodWindow(t *testing.T) {
	const offset = 250 * time.Millisecond // the sidecar's clock is ahead
	skew := load.Estimate{Offset: offset, Uncertainty: 3 * time.Millisecond, Samples: 5}
	base := podState{name: "web-1", hostIP: nodeIP, deleted: at(1000), leftSlices: at(1010)}
	with := func(mod func(*podState)) podState {
		p := base
		p.sidecar = sidecarState{final: record(offset, peer(ingressIP, 2100, 2200), peer(nodeIP, 9000, 9000)), skew: skew, skewOK: true}
		mod(&p)
		return p
	}
	ms := func(n int) *int64 { return ptr(int64(time.Duration(n) * time.Millisecond)) }
	for _, tc := range []struct {
		name       string
		pod        podState
		failed     int
		window     *int64
		floor      string
		source     string
		unreadable string
	}{
		// The node's peer (9000 ms) is the kubelet's: the ingress's last
		// request at 2200 ms is the window's end.
		{"kubelet peer excluded", with(func(*podState) {}), 0, ms(1200), "", SourceTermination, ""},
		{"listener closed while still ready", with(func(p *podState) {
			p.leftSlices = at(1600)
			p.sidecar.final.ListenerClosed = ptr(at(1500).Add(offset))
		}), 0, ms(1200), "stopped listening", SourceTermination, ""},
		{"listener closed after leaving the slices", with(func(p *podState) {
			p.sidecar.final.ListenerClosed = ptr(at(3000).Add(offset))
		}), 0, ms(1200), "", SourceTermination, ""},
		{"requests to it failed", with(func(*podState) {}), 3, ms(1200), "3 failed requests", SourceTermination, ""},
		{"termination message preferred", with(func(p *podState) {
			p.sidecar.latest = record(offset, peer(ingressIP, 1500, 1500))
		}), 0, ms(1200), "", SourceTermination, ""},
		{"pod proxy only: a floor", with(func(p *podState) {
			p.sidecar.latest, p.sidecar.final = p.sidecar.final, nil
			p.sidecar.latest.Now = at(2500).Add(offset)
		}), 0, ms(1200), "read through the pod proxy 1.5s after", SourcePodProxy, ""},
		{"no traffic after the deletion", with(func(p *podState) {
			p.sidecar.final = record(offset, peer(ingressIP, 800, 900))
		}), 0, ms(-100), "", SourceTermination, ""},
		// Peers beyond the sidecar's cap are in its totals only: those
		// count, the kubelet's with them.
		{"peers beyond the cap", with(func(p *podState) {
			p.sidecar.final.PeersOverflow = 4
			p.sidecar.final.LastAccept = ptr(at(2600).Add(offset))
		}), 0, ms(1600), "", SourceTermination, ""},
		// A connection no dump saw, counted by the poll at 2500 ms: the
		// window reaches that poll.
		{"an unseen connection counts", with(func(p *podState) {
			p.sidecar.final.LastUnseen = ptr(at(2500).Add(offset))
		}), 0, ms(1500), "", SourceTermination, ""},
		{"unreadable: proxy refused, no termination message", with(func(p *podState) {
			p.sidecar = sidecarState{err: "pods \"web-1\" is forbidden", tried: at(1500)}
		}), 0, nil, "", "", "forbidden"},
		{"unreadable: no clock", with(func(p *podState) {
			p.sidecar.skewOK, p.sidecar.skewErr = false, "clock sample: no exchange succeeded"
		}), 0, nil, "", SourceTermination, "clock"},
		{"unreadable: only the kubelet's traffic", with(func(p *podState) {
			p.sidecar.final = record(offset, peer(nodeIP, 9000, 9000))
		}), 0, nil, "", SourceTermination, "kubelet"},
		{"unreadable: no sidecar in the pod", with(func(p *podState) { p.sidecar = sidecarState{} }), 0, nil, "", "", "no " + deploy.SidecarContainerName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := podWindow(tc.pod, tc.failed)
			t.Log(w)
			if (w.WindowNS == nil) != (tc.window == nil) || w.WindowNS != nil && *w.WindowNS != *tc.window {
				t.Errorf("window %v, want %v", fmtNS(w.WindowNS), fmtNS(tc.window))
			}
			if w.Floor != (tc.floor != "") || !strings.Contains(w.FloorWhy, tc.floor) {
				t.Errorf("floor %v (%q), want %v (%q)", w.Floor, w.FloorWhy, tc.floor != "", tc.floor)
			}
			if w.Source != tc.source {
				t.Errorf("source %q, want %q", w.Source, tc.source)
			}
			if (w.Unreadable != "") != (tc.unreadable != "") || !strings.Contains(w.Unreadable, tc.unreadable) {
				t.Errorf("unreadable %q, want %q", w.Unreadable, tc.unreadable)
			}
			if w.WindowNS != nil && w.UncertaintyNS != int64(15*time.Millisecond) {
				t.Errorf("uncertainty %s, want the skew's 3ms + the sidecar's longest gap 12ms", time.Duration(w.UncertaintyNS))
			}
		})
	}
}

func fmtNS(ns *int64) string {
	if ns == nil {
		return "none"
	}
	return time.Duration(*ns).String()
}

func TestPodWindowString(t *testing.T) {
	for _, tc := range []struct {
		w    PodWindow
		want string
	}{
		{PodWindow{Pod: "web-1", WindowNS: ptr(int64(1204e6)), UncertaintyNS: 15e6, Source: SourceTermination},
			"web-1: 1.204s ±15ms after its deletion (termination message)"},
		{PodWindow{Pod: "web-1", WindowNS: ptr(int64(1204e6)), UncertaintyNS: 15e6, Source: SourceTermination, Floor: true, FloorWhy: "3 failed requests",
			ListenerClosedNS: ptr(int64(5e6)), UnseenConnections: ptr(int64(2))},
			"web-1: ≥ 1.204s ±15ms after its deletion (a floor: 3 failed requests; listener closed 5ms after the deletion; 2 connections unseen) (termination message)"},
		{PodWindow{Pod: "web-1", WindowNS: ptr(int64(-100e6)), UncertaintyNS: 15e6, Source: SourcePodProxy},
			"web-1: no traffic after its deletion (the last 100ms ±15ms before it) (pod proxy)"},
		{PodWindow{Pod: "web-1", Unreadable: "no epwindow-sidecar"}, "web-1: unreadable: no epwindow-sidecar"},
	} {
		if got := tc.w.String(); got != tc.want {
			t.Errorf("String() = %q\n        want %q", got, tc.want)
		}
	}
}

// proxyReply is a pod-proxy answer for the fake clientset.
type proxyReply struct {
	body []byte
	err  error
}

func (p proxyReply) DoRaw(context.Context) ([]byte, error) { return p.body, p.err }
func (p proxyReply) Stream(context.Context) (io.ReadCloser, error) {
	return nil, errors.New("not streamed")
}

var _ restclient.ResponseWrapper = proxyReply{}

// sidecarPod is a pod of the Deployment with the sidecar on port 9091 (or
// none with sidecar false).
func sidecarPod(name string, withSidecar bool) *corev1.Pod {
	p := testPod(name, false)
	p.Status.HostIP = nodeIP
	if withSidecar {
		c, err := deploy.SidecarContainer(corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}, deploy.SidecarOptions{})
		if err != nil {
			panic(err)
		}
		p.Spec.InitContainers = []corev1.Container{c}
	}
	return p
}

// TestReadSidecars: the tracker reads each pod's sidecar through the pod
// proxy (GET /clock for its offset, GET /timeline), keeps the latest
// record, and prefers the termination message in the pod's final status;
// a pod whose sidecar cannot be read is reported unreadable, not dropped.
func TestReadSidecars(t *testing.T) {
	const offset = 40 * time.Millisecond
	clk := testclock.NewFakeClock(at(500))
	client := fake.NewSimpleClientset()
	var paths []string
	client.PrependProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		pa := a.(k8stesting.ProxyGetAction)
		paths = append(paths, pa.GetName()+":"+pa.GetPort()+pa.GetPath())
		if pa.GetName() != "web-1" {
			return true, proxyReply{err: errors.New(`the server is currently unable to handle the request (get pods web-2:9091)`)}, nil
		}
		switch pa.GetPath() {
		case "/clock":
			b, _ := json.Marshal(probe.ClockReplyAt(clk.Now().Add(offset)))
			return true, proxyReply{body: b}, nil
		case "/timeline":
			b, _ := json.Marshal(record(offset, peer(ingressIP, 1400, 1450)))
			return true, proxyReply{body: b}, nil
		}
		return true, proxyReply{err: errors.New("404")}, nil
	})
	tr := newTracker(client, clk, testNS, labels.Everything())
	for _, p := range []*corev1.Pod{sidecarPod("web-1", true), sidecarPod("web-2", true), sidecarPod("web-3", false)} {
		tr.onPod(at(0), p, false)
	}
	tr.readSidecarsOnce(context.Background())
	slices.Sort(paths)
	if want := []string{"web-1:9091/clock", "web-1:9091/clock", "web-1:9091/clock", "web-1:9091/clock", "web-1:9091/clock", "web-1:9091/timeline",
		"web-2:9091/clock", "web-2:9091/clock", "web-2:9091/clock", "web-2:9091/clock", "web-2:9091/clock", "web-2:9091/timeline"}; !slices.Equal(paths, want) {
		t.Errorf("pod proxy reads %q, want %q (web-3 has no sidecar)", paths, want)
	}
	// Not terminating: read again only after sidecarIdleEvery.
	paths = nil
	clk.Step(time.Second)
	tr.readSidecarsOnce(context.Background())
	if len(paths) != 0 {
		t.Errorf("read %q a second later, before any deletion", paths)
	}
	// Deleted: read every tick, the clock once.
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		tr.onPod(at(1000), deleting(sidecarPod(name, name != "web-3")), false)
	}
	paths = nil
	tr.readSidecarsOnce(context.Background())
	slices.Sort(paths)
	if want := []string{"web-1:9091/timeline", "web-2:9091/clock", "web-2:9091/clock", "web-2:9091/clock", "web-2:9091/clock", "web-2:9091/clock", "web-2:9091/timeline"}; !slices.Equal(paths, want) {
		t.Errorf("pod proxy reads while terminating %q, want %q", paths, want)
	}
	s := tr.snapshot()["web-1"]
	if s.sidecar.latest == nil || !s.sidecar.skewOK || s.sidecar.skew.Offset != offset {
		t.Fatalf("web-1's sidecar state %+v, want its record and its clock 40ms ahead", s.sidecar)
	}

	// web-2's final status carries the sidecar's termination message; the
	// pod proxy could not reach it. Its clock is still unknown, so it is
	// unreadable for that; web-1's window is from the pod proxy (a floor).
	fin := deleting(sidecarPod("web-2", true))
	msg, _ := json.Marshal(record(0, peer(ingressIP, 1900, 1900)))
	fin.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: deploy.SidecarContainerName,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: string(msg)}}}}
	tr.onPod(at(2000), fin, true)
	if tr.snapshot()["web-2"].sidecar.final == nil {
		t.Fatal("web-2's termination message not kept")
	}
	old := map[types.UID]podState{}
	for uid, p := range tr.snapshot() {
		old[uid] = p
	}
	ro := Rollout{N: 1}
	tg := &target{track: tr, gen: &fakeLoad{clk: clk}, sidecar: true}
	(&runner{clk: clk}).collect(&ro, tg, old, at(0), at(3000), 0)
	if len(ro.Windows) != 3 {
		t.Fatalf("windows %+v, want one per replaced pod, unreadable ones too", ro.Windows)
	}
	for _, w := range ro.Windows {
		t.Log(w)
	}
	if w := ro.Windows[0]; w.Pod != "web-1" || w.WindowNS == nil || *w.WindowNS != int64(450*time.Millisecond) || w.Source != SourcePodProxy || !w.Floor {
		t.Errorf("web-1: %s; want 450ms from the pod proxy, a floor", w)
	}
	if w := ro.Windows[1]; w.Pod != "web-2" || w.Source != SourceTermination || !strings.Contains(w.Unreadable, "unable to handle the request") {
		t.Errorf("web-2: %s; want its termination message, unreadable for its clock (the pod proxy's error)", w)
	}
	if w := ro.Windows[2]; w.Pod != "web-3" || !strings.Contains(w.Unreadable, "no "+deploy.SidecarContainerName) {
		t.Errorf("web-3: %s; want unreadable: no sidecar in the pod", w)
	}
}

func deleting(p *corev1.Pod) *corev1.Pod {
	ts := metav1.NewTime(t0)
	p.DeletionTimestamp = &ts
	return p
}

// TestCheckDeploymentSidecar: --sidecar needs the sidecar in the pod
// template, and says how to add it (bad input, exit 2, nothing changed).
func TestCheckDeploymentSidecar(t *testing.T) {
	two := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 8443}}}}}}},
		Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}}
	err := checkDeployment(d, Config{Sidecar: true})
	var usageErr *UsageError
	if !errors.As(err, &usageErr) {
		t.Fatalf("checkDeployment without the sidecar: %v, want a usage error", err)
	}
	for _, want := range []string{"--" + FlagSidecar, "epwindow manifests --sidecar --name web --port 8080 --port 8443", "epwindow measure --target deployment/web"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := checkDeployment(d, Config{}); err != nil {
		t.Errorf("without --sidecar: %v", err)
	}
	c, err := deploy.SidecarContainer(d.Spec.Template.Spec, deploy.SidecarOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.InitContainers = []corev1.Container{c}
	if err := checkDeployment(d, Config{Sidecar: true}); err != nil {
		t.Errorf("with the sidecar: %v", err)
	}
}

// TestPermissionsSidecar: get pods/proxy is asked for with --sidecar (or
// --check-port), once, and not otherwise.
func TestPermissionsSidecar(t *testing.T) {
	proxies := func(cfg Config) int {
		n := 0
		for _, p := range Permissions(cfg) {
			if p.Resource == "pods" && p.Subresource == "proxy" && p.Verb == "get" {
				n++
				if cfg.Sidecar && !strings.Contains(p.Why, "--"+FlagSidecar) {
					t.Errorf("pods/proxy's why %q does not name --%s", p.Why, FlagSidecar)
				}
			}
		}
		return n
	}
	cp := &CheckPort{Port: 8080, Path: "/"}
	for _, tc := range []struct {
		cfg  Config
		want int
	}{
		{Config{Namespace: "shop"}, 0},
		{Config{Namespace: "shop", Sidecar: true}, 1},
		{Config{Namespace: "shop", CheckPort: cp}, 1},
		{Config{Namespace: "shop", Sidecar: true, CheckPort: cp}, 1},
	} {
		if got := proxies(tc.cfg); got != tc.want {
			t.Errorf("sidecar %v, check port %v: %d get pods/proxy, want %d", tc.cfg.Sidecar, tc.cfg.CheckPort != nil, got, tc.want)
		}
	}
}

// TestRunSidecarPreflight: Run with --sidecar on a Deployment without it
// stops with bad input before anything changes; without get pods/proxy it
// names that permission.
func TestRunSidecarPreflight(t *testing.T) {
	two := int32(2)
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}},
		Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}}
	cfg := Config{Namespace: "shop", Deployment: "web", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:9090", Path: "/"}, Method: "GET", Rate: 50,
		LoadTimeout: time.Second, Rollouts: 1, Timeout: time.Minute, NoRouteCheck: true, Sidecar: true}
	for _, tc := range []struct {
		name    string
		allowed func(resource, sub string) bool
		want    string
	}{
		{"no sidecar", func(string, string) bool { return true }, "epwindow manifests --sidecar --name web --port 8080"},
		{"no pods/proxy", func(r, sub string) bool { return r != "pods" || sub != "proxy" }, "get pods/proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(web.DeepCopy())
			client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				ra := review.Spec.ResourceAttributes
				review.Status.Allowed = ra == nil || tc.allowed(ra.Resource, ra.Subresource)
				return true, review, nil
			})
			c := cfg
			c.Client = client
			_, err := Run(context.Background(), c, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v; want it to say %q", err, tc.want)
			}
			for _, a := range client.Actions() {
				if v := a.GetVerb(); v != "get" && v != "list" && !(v == "create" && a.GetResource().Resource == "selfsubjectaccessreviews") {
					t.Errorf("%s %s: nothing may change", v, a.GetResource().Resource)
				}
			}
		})
	}
}
