// Command etcd is the upstream etcd server, built from its Go module so the
// test control plane needs no release download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
