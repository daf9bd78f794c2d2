// Package nodeagent is the node side of the local cluster: the subset of the
// kubelet that pod termination timing depends on, running pods as plain
// processes inside network namespaces on this machine.
//
// For every Node it is given it registers the Node object (Ready, InternalIP
// 127.0.0.1, capacity, the kubelet endpoint) and keeps it Ready with Lease
// heartbeats and NodeReady status updates. For every pod bound to one of those
// nodes it creates a network namespace named "<prefix>-<pod UID>", attaches it
// to the "<prefix>-br" bridge with the standard CNI plugins (bridge, host-local,
// loopback from CNIBinDir), starts each container's command as a process in
// that namespace, runs readiness probes and reports the pod status the way the
// kubelet does. On deletion it follows the kubelet's order
// (pkg/kubelet/kuberuntime/kuberuntime_container.go, killContainer): preStop
// hook, SIGTERM, wait out the rest of the grace period, SIGKILL; then CNI DEL,
// netns removal, and the final DELETE of the pod object with grace 0.
//
// Images are never pulled. A container's command names a local binary:
// command[0]'s base name is looked up in Config.BinDir first (so
// command: ["epwindow", "probe"] or ["/epwindow", "probe"] runs
// BinDir/epwindow), then, if absent there, command[0] is resolved on this
// machine's PATH (so ["sh", "-c", "..."] runs the host's /bin/sh). A container
// without a command cannot run: it stays Waiting with reason
// CreateContainerConfigError.
//
// Each container process is started through a re-exec shim (ShimMain, selected
// by ShimArg as argv[1]) that enters the pod's network namespace, gets its own
// mount and UTS namespaces (hostname = pod name), a tmpfs /dev holding the
// basic device nodes and the container's termination-message file bind-mounted
// from the host, optionally a read-only root, and then drops to the
// securityContext's runAsUser/runAsGroup before exec. The binary embedding this
// package must dispatch to ShimMain before doing anything else.
//
// Files live under Config.StateDir: cni/ (the CNI configs, IPAM state and
// cache) and pods/<namespace>_<name>_<uid>/ with each container's
// stdout+stderr (<container>.log, served as kubectl logs) and its
// termination-message file (<container>.termination-log). The kubelet API
// (HTTPS, self-signed, 127.0.0.1:KubeletPort, the port every Node reports
// in daemonEndpoints) serves port-forward (SPDY and websocket, via
// k8s.io/cri-streaming, dialling 127.0.0.1:port inside the pod's network
// namespace) and container logs.
//
// Network safety: SetupNetwork installs an "unreachable" route for the whole
// pod CIDR in the root namespace before any pod starts; the bridge carries
// only the per-node /24 gateway addresses, and pods get no default route, so
// nothing addressed to a pod address can leave the machine and pods can reach
// only the bridge subnet. The bridge is never given a gateway role by the
// plugin (isGateway false), so the host's ip_forward setting is left alone.
// Host-side veths are renamed "<prefix>-<first 8 UID characters>", so every
// link the agent causes carries the prefix. Probes and hooks reach only
// loopback and pod addresses and never follow redirects.
//
// Init containers run one at a time, to completion, before the others.
// Native sidecars (init containers with restartPolicy Always) run as the
// kubelet runs them: the next container starts once a sidecar has started
// (its startup probe passed, if it has one), it is restarted with the
// usual back-off whatever the pod's restartPolicy, its readiness counts
// toward the pod's, and it is stopped only after every regular container
// exited, in reverse order, within the pod's grace period; its preStop
// hook runs when the termination begins, as the kubelet's does
// (kuberuntime_termination_order.go). A pod whose regular containers are
// done stops its sidecars and completes.
// Exec hooks and probes run in the pod's network namespace as the
// container's user, in a mount namespace of their own.
//
// Readiness, liveness and startup probes (httpGet, tcpSocket, exec) run as
// the kubelet's prober workers do; gRPC probes are not supported.
//
// Volumes are laid out before a pod's first container starts (volume.go):
// emptyDir, configMap, secret, downwardAPI and projected volumes (the
// ServiceAccount admission plugin's kube-api-access-*: a token requested
// for the pod and refreshed at 80% of its life, the cluster CA, the
// namespace) under the pod's directory, persistentVolumeClaim volumes at
// their bound hostPath or local PersistentVolume's path, and hostPath
// volumes. The shim binds them at their mount paths; a mount path missing
// on this machine is made inside an overlay of its deepest existing
// directory, in the container's mount namespace only (shimmount.go), so
// the host's filesystem is never written for a container. Every container
// gets the kubernetes Service's KUBERNETES_SERVICE_HOST/PORT variables, as
// the kubelet gives them, so client-go's in-cluster config works.
//
// It does not pull images, run postStart hooks, resource limits (cgroups),
// or PID/IPC namespaces; it does not inject the other Services' link
// variables (enableServiceLinks), enforce an emptyDir's sizeLimit or back
// medium Memory with a tmpfs.
package nodeagent
