package testenv

import (
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// IgnoringTERM is a container that ignores SIGTERM and says so through its
// readiness: `sh -c "trap ” TERM; … exec sleep"` with a readiness probe
// that passes only once the shell has run the trap.
//
// A Running container is not yet one that ignores SIGTERM: Running means
// the process started, and the node agent reports it before sh has parsed
// its script, so a deletion right after Running can meet sh's default
// SIGTERM action (exit 143). The shell therefore writes a marker after the
// trap — dir/$(POD_NAME), the pod's name from the downward API, so a
// Deployment's pods do not share one — and the readiness probe (exec, every
// second) looks for it. An ignored signal stays ignored across exec, so
// sleep itself (the only process left) ignores SIGTERM. dir must be on the
// machine's file system (the node agent runs containers on the host's
// root); a test's t.TempDir() is.
func IgnoringTERM(name, dir string) corev1.Container {
	marker := filepath.Join(dir, "$(POD_NAME)")
	return corev1.Container{
		Name: name, Image: "sh:local",
		Command: []string{"sh", "-c", "trap '' TERM; : > '" + marker + "'; exec sleep 100000"},
		Env: []corev1.EnvVar{{
			Name:      "POD_NAME",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				Command: []string{"test", "-e", marker},
			}},
			PeriodSeconds:    1,
			FailureThreshold: 1,
		},
	}
}
