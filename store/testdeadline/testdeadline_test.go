package testdeadline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadFactor(t *testing.T) {
	require.Equal(t, 1.0, loadFactor(0, 2), "no load average read")
	require.Equal(t, 1.0, loadFactor(1.5, 2), "an idle machine")
	require.Equal(t, 3.0, loadFactor(6, 2), "three runnable tasks per core")
	require.Equal(t, float64(maxLoadFactor), loadFactor(100, 2), "bounded")
	require.Equal(t, 4.0, loadFactor(4, 0), "no CPU count counts as one")
}

func TestEnv(t *testing.T) {
	t.Setenv(Env, "2.5")
	require.Equal(t, 2.5, Factor())
	require.Equal(t, 25*time.Second, Scale(10*time.Second))
	for _, bad := range []string{"0.5", "x", ""} {
		t.Setenv(Env, bad)
		require.GreaterOrEqual(t, Factor(), 1.0, "%q is ignored", bad)
		require.LessOrEqual(t, Factor(), float64(maxLoadFactor), "%q is ignored", bad)
	}
}
