package nodeagent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary be both the container shim (as the
// epwindow-local binary is) and the containers' app.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case ShimArg:
			ShimMain(os.Args[2:])
		case testAppArg:
			testApp(os.Args[2:])
			return
		case testGetArg:
			// An exec hook: GET a URL from inside the pod.
			resp, err := http.Get(os.Args[2])
			if err != nil || resp.StatusCode != 200 {
				fmt.Fprintln(os.Stderr, "get:", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

// testAppArg makes the test binary a container app (see testApp);
// testGetArg makes it an HTTP GET for exec hooks.
const (
	testAppArg = "testapp"
	testGetArg = "testget"
)

// appReport is what the test app writes as its termination message.
type appReport struct {
	StartedNS int64             `json:"started_ns"`
	PreStopNS int64             `json:"prestop_ns"`
	SigtermNS int64             `json:"sigterm_ns"`
	Env       map[string]string `json:"env"`
	Hostname  string            `json:"hostname"`
	UID       int               `json:"uid"`
	RootRO    bool              `json:"root_ro"`
	// Files are the contents of the paths in TESTAPP_READ (comma
	// separated), read at start; WriteErr is the error of writing
	// TESTAPP_WRITE, if any.
	Files    map[string]string `json:"files,omitempty"`
	WriteErr string            `json:"write_err,omitempty"`
}

// testApp serves :8080 (/healthz, /prestop, /report) and on SIGTERM writes
// its report to /dev/termination-log and exits 0, or with "ignore-term"
// keeps running until killed. Options: "port=N" serves :N instead (native
// sidecars share the pod's network namespace), "listen-after=D" listens
// only D after the start, "linger=D" exits D after SIGTERM.
func testApp(args []string) {
	started := time.Now().UnixNano()
	ignore := slices.Contains(args, "ignore-term")
	// unready-on-term: /healthz answers 503 after SIGTERM, as the probe does.
	unready := slices.Contains(args, "unready-on-term")
	port, listenAfter, linger := "8080", time.Duration(0), time.Duration(0)
	for _, a := range args {
		switch k, v, _ := strings.Cut(a, "="); k {
		case "port":
			port = v
		case "listen-after":
			listenAfter, _ = time.ParseDuration(v)
		case "linger":
			linger, _ = time.ParseDuration(v)
		}
	}
	if len(args) > 0 && args[0] == "exit-3" {
		os.Exit(3)
	}
	if len(args) > 0 && args[0] == "exit-0" {
		// The start stamp, for tests of the start order.
		b, _ := json.Marshal(appReport{StartedNS: started})
		_ = os.WriteFile("/dev/termination-log", b, 0o644)
		os.Exit(0)
	}
	var mu sync.Mutex
	rep := appReport{StartedNS: started, Env: map[string]string{}, UID: os.Getuid()}
	for _, k := range []string{"POD_NAME", "POD_NAMESPACE", "POD_IP", "NODE_NAME", "GREETING", "PATH", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		rep.Env[k] = os.Getenv(k)
	}
	if r := os.Getenv("TESTAPP_READ"); r != "" {
		rep.Files = map[string]string{}
		for _, p := range strings.Split(r, ",") {
			b, err := os.ReadFile(p)
			if err != nil {
				b = []byte("error: " + err.Error())
			}
			rep.Files[p] = string(b)
		}
	}
	if p := os.Getenv("TESTAPP_WRITE"); p != "" {
		if err := os.WriteFile(p, []byte("written"), 0o644); err != nil {
			rep.WriteErr = err.Error()
		}
	}
	rep.Hostname, _ = os.Hostname()
	probe := filepath.Join("/", fmt.Sprintf(".epwt-ro-%d", os.Getpid()))
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		rep.RootRO = true
	} else {
		os.Remove(probe)
	}
	write := func() {
		mu.Lock()
		b, _ := json.Marshal(rep)
		mu.Unlock()
		_ = os.WriteFile("/dev/termination-log", b, 0o644)
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		termed := rep.SigtermNS != 0
		mu.Unlock()
		if unready && termed {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	http.HandleFunc("/prestop", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		rep.PreStopNS = time.Now().UnixNano()
		mu.Unlock()
		write()
	})
	http.HandleFunc("/report", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(rep)
	})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		<-sig
		mu.Lock()
		rep.SigtermNS = time.Now().UnixNano()
		mu.Unlock()
		write()
		if !ignore {
			time.Sleep(linger)
			os.Exit(0)
		}
	}()
	time.Sleep(listenAfter)
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
}
