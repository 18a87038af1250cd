// cdivalidate: load CDI spec files with the reference CDI library (tags.cncf.io/container-device-interface)
// exactly as container runtimes do, and print the devices and the minimum spec version it computes.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

func main() {
	rc := 0
	for _, path := range os.Args[1:] {
		out := map[string]interface{}{"path": path}
		spec, err := cdi.ReadSpec(path, 0)
		if err != nil {
			out["error"] = err.Error()
			rc = 1
		} else {
			var names []string
			for _, d := range spec.Devices {
				names = append(names, spec.GetVendor()+"/"+spec.GetClass()+"="+d.Name)
			}
			min, _ := specs.MinimumRequiredVersion(spec.Spec)
			out["devices"] = names
			out["cdiVersion"] = spec.Version
			out["minimumVersion"] = min
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
	}
	os.Exit(rc)
}
