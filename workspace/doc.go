// Package workspace owns a workspace's profile: the JSON file that names the
// workspace, its credentials, its per-service write policies, its egress
// rules and its DNS and consent settings (DESIGN.md §Profile).
//
// Loading is strict. Unknown fields, duplicate keys, wrong types and bad
// values are errors that name the field path ("credentials[0].secret"), and
// every bad field is reported at once. A profile that does not load changes
// nothing: guardd refuses to start, and a reload keeps the old profile.
// Problems that do not make the profile unsafe, such as a write policy with
// nothing to apply to, are Warnings.
//
// The package also writes new profiles (guardctl profile init) and knows
// where a workspace keeps its state.
package workspace
