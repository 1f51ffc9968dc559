package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ServerPIDs returns the process IDs of the kube-apiserver and etcd this
// process started, so that a benchmark can read their CPU time: what the
// controller asks of them is part of its cost.
func (cp *ControlPlane) ServerPIDs() (apiserver, etcd int, err error) {
	if apiserver, err = apiServerPID(cp.env.ControlPlane.APIServer.SecureServing.Port); err != nil {
		return 0, 0, err
	}
	if etcd, err = childNamed("etcd"); err != nil {
		return 0, 0, err
	}
	return apiserver, etcd, nil
}

// childNamed finds the one child of this process whose executable is name.
func childNamed(name string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self, found := os.Getpid(), 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0]) != name {
			continue
		}
		if ppid, err := parentPID(pid); err == nil && ppid == self {
			if found != 0 {
				return 0, fmt.Errorf("more than one %s child of this process (%d, %d)", name, found, pid)
			}
			found = pid
		}
	}
	if found == 0 {
		return 0, fmt.Errorf("no %s child of this process", name)
	}
	return found, nil
}
