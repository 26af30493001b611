// Package guard holds the embedded demo workspace, so that guardd --demo
// runs from any directory.
package guard

import _ "embed"

//go:embed testdata/demo/profile.json
var demoProfile string

// DemoProfile returns testdata/demo/profile.json, the profile that README's
// first command runs and that the tests use.
func DemoProfile() []byte { return []byte(demoProfile) }
