package nodeagent

import (
	"net/http"
	"path/filepath"
)

// routes registers the kubelet API endpoints the agent serves.
func (a *agent) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", a.containerLogs)
	mux.HandleFunc("/portForward/{ns}/{pod}", a.portForward)
	mux.HandleFunc("/portForward/{ns}/{pod}/{uid}", a.portForward)
}

// containerLogs serves a container's log file (kubectl logs).
func (a *agent) containerLogs(w http.ResponseWriter, r *http.Request) {
	c := a.findContainer(r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container"))
	if c == "" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	http.ServeFile(w, r, c)
}

// findContainer returns the log file of a running pod's container.
func (a *agent) findContainer(ns, pod, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.workers {
		w.mu.Lock()
		p := w.latest
		w.mu.Unlock()
		if p == nil || p.Namespace != ns || p.Name != pod {
			continue
		}
		for _, c := range p.Spec.Containers {
			if c.Name == name {
				return filepath.Join(podDir(a.cfg, p), name+".log")
			}
		}
	}
	return ""
}
