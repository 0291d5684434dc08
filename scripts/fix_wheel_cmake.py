"""Point the ROS wheels' CMake exports at this venv's Python and numpy include dirs.

The message wheels are built in a manylinux container and export
``/opt/python/cp311-cp311/...`` include paths, which CMake rejects as non-existent when a
package depends on them. Rewriting the paths inside the venv touches nothing outside it; it is
re-run after every install because new message wheels bring new exports.
"""

import pathlib
import re
import sys
import sysconfig

import numpy

_PYTHON_INC = re.compile(r"/opt/python/cp\d+-cp\d+/include/python\d+\.\d+")
_NUMPY_INC = re.compile(
    r"/opt/python/cp\d+-cp\d+/lib/python\d+\.\d+/site-packages/numpy/_core/include")


def main(venv: str) -> int:
    python_inc = sysconfig.get_paths()['include']
    numpy_inc = numpy.get_include()
    fixed = 0
    for path in pathlib.Path(venv, 'share').rglob('*.cmake'):
        text = path.read_text()
        if '/opt/python/' not in text:
            continue
        new = _NUMPY_INC.sub(numpy_inc, text)
        new = _PYTHON_INC.sub(python_inc, new)
        if new != text:
            path.write_text(new)
            fixed += 1
    if fixed:
        print(f'[setup] rewrote /opt/python include paths in {fixed} CMake files')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
