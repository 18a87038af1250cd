// Command etcd is the etcd server built from the go.etcd.io/etcd/server/v3
// module (the root go.etcd.io/etcd/v3 module carries replace directives, so
// it cannot be `go install`ed; its main() is just this call).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
