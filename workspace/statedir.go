package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultStateRoot is where workspaces keep state unless told otherwise:
// $XDG_STATE_HOME/guard, or ~/.local/state/guard.
func DefaultStateRoot() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "guard"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no state directory: set --state-dir or HOME: %w", err)
	}
	return filepath.Join(home, ".local", "state", "guard"), nil
}

// DefaultStateDir is the state directory of workspace name.
func DefaultStateDir(name string) (string, error) {
	root, err := DefaultStateRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, name), nil
}

// PrepareStateDir creates dir with mode 0700, or tightens an existing one to
// 0700: it will hold the control socket, the event log and, later, the CA
// key.
func PrepareStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if !st.IsDir() {
		return errors.New("state dir " + dir + " is not a directory")
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	return nil
}
