package mpi

import "testing"

func TestLaunched(t *testing.T) {
	for _, v := range launcherVars {
		t.Setenv(v, "")
	}
	cases := []struct {
		env      map[string]string
		size     int
		variable string
	}{
		{nil, 0, ""},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "4"}, 4, "OMPI_COMM_WORLD_SIZE"},
		{map[string]string{"PMI_SIZE": "2"}, 2, "PMI_SIZE"},
		{map[string]string{"MV2_COMM_WORLD_SIZE": "1"}, 1, "MV2_COMM_WORLD_SIZE"},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "many"}, 0, ""},
	}
	for _, c := range cases {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		if n, v := Launched(); n != c.size || v != c.variable {
			t.Errorf("%v: Launched() = %d, %q; want %d, %q", c.env, n, v, c.size, c.variable)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}
