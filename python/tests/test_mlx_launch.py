"""The MLX drop-in for code kiln does not control, in fresh interpreters: ``python -m kiln.mlx``
running a script or a module, and ``KILN_MLX=1`` with the ``--site`` directory on
``PYTHONPATH`` (installed when ``mlx.core`` is first imported; another ``sitecustomize`` still
runs; nothing happens without the variable)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("mlx.core")

SCRIPT = '''
import sys
print("mlx imported before the script:", "mlx.core" in sys.modules)
import mlx.core as mx

kernel = mx.fast.metal_kernel(name="twice", input_names=["a"], output_names=["out"],
                              source="uint i = thread_position_in_grid.x; out[i] = a[i] * 2;")
a = mx.random.normal((16,))
(out,) = kernel(inputs=[a], grid=(16, 1, 1), threadgroup=(16, 1, 1), output_shapes=[(16,)],
                output_dtypes=[mx.float32])
assert mx.array_equal(out, a * 2), "wrong result"
print("ran on kiln:", type(kernel).__module__, sys.argv[1:])
'''


def python(*args, env=None, cwd=None):
    full = dict(os.environ)
    full.pop("KILN_MLX", None)
    full.update(env or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full, cwd=cwd, timeout=300)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "user_script.py"
    path.write_text(SCRIPT)
    return path


def test_python_m_kiln_mlx_runs_a_script_with_its_arguments(script):
    r = python("-m", "kiln.mlx", str(script), "--flag", "x")
    assert r.returncode == 0, r.stderr
    assert "ran on kiln: kiln.mlx ['--flag', 'x']" in r.stdout


def test_python_m_kiln_mlx_runs_a_module(script):
    r = python("-m", "kiln.mlx", "-m", "user_script", "y", cwd=script.parent)
    assert r.returncode == 0, r.stderr
    assert "ran on kiln: kiln.mlx ['y']" in r.stdout


def test_kiln_mlx_variable_with_the_site_directory(script, tmp_path):
    site = python("-m", "kiln.mlx", "--site").stdout.strip()
    assert os.path.isfile(os.path.join(site, "sitecustomize.py"))
    other = tmp_path / "other_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE_RAN'] = '1'\n")
    (tmp_path / "check_other.py").write_text("import os\nprint('other site ran:', os.environ.get('OTHER_SITE_RAN'))\n")
    # Where MLX itself comes from PYTHONPATH (a wheel unpacked beside the interpreter), it stays.
    path = os.pathsep.join([site, str(other)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

    r = python(str(script), env={"KILN_MLX": "1", "PYTHONPATH": path})
    assert r.returncode == 0, r.stderr
    # Installed lazily: the interpreter started without importing MLX.
    assert "mlx imported before the script: False" in r.stdout
    assert "ran on kiln: kiln.mlx" in r.stdout
    r = python(str(tmp_path / "check_other.py"), env={"KILN_MLX": "1", "PYTHONPATH": path})
    assert "other site ran: 1" in r.stdout

    r = python(str(script), env={"PYTHONPATH": path})
    assert r.returncode != 0
    assert "No Metal back-end" in r.stderr
