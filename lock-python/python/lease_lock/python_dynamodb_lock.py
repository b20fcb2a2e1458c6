# -*- coding: utf-8 -*-
"""A drop-in replacement for python-dynamodb-lock 0.9.1, on lease_lock's Rust client.

Change one import::

    from python_dynamodb_lock.python_dynamodb_lock import *   # before
    from lease_lock.python_dynamodb_lock import *             # after

and nothing else: the same names, parameters, defaults, lock attributes,
statuses, error codes and callbacks, on the table the fleet already uses
(python-dynamodb-lock's layout), so locks taken by either library exclude the
other's and each takes over the other's crashed holders. Roll a fleet over one
process at a time.

What is better than 0.9.1 (docs/python.md lists each difference):

* every lock has a ``fence`` (a fencing token, stored in the item's ``fence``
  attribute) to hand to the resource the lock protects;
* an exception raised inside ``with lock:`` propagates (0.9.1 swallows it);
* a lock in danger keeps heartbeating, and comes back to ``LOCKED`` when a
  heartbeat lands (0.9.1 stops heartbeating it for good);
* acquiring a free lock is one round trip (0.9.1 reads first, then writes);
* heartbeats run on the Rust core's threads, so a busy GIL does not delay them.

The client needs boto3 (``pip install 'lease_lock[boto3]'``); it takes the
boto3 resource it is given: its endpoint, its region and its credentials
(asked for again as they near expiry, never copied once).
"""

# The names python-dynamodb-lock's module imports are imported here too:
# ``from ... import *`` of either module gives the same names.
try:
    from botocore.exceptions import ClientError
except ImportError as error:
    raise ImportError(
        "lease_lock.python_dynamodb_lock takes a boto3 resource: pip install 'lease_lock[boto3]'"
    ) from error
from concurrent.futures import ThreadPoolExecutor
import datetime
from decimal import Decimal
import logging
import math as _math
import socket
import time
import threading
from urllib.parse import quote
import uuid

from . import _client, _errors, _native
from ._types import LeaseState as _LeaseState

# module level logger: under 0.9.1's name, so a program's logging
# configuration for python_dynamodb_lock applies unchanged.
logger = logging.getLogger('python_dynamodb_lock.python_dynamodb_lock')


def _seconds(value):
    """A period given as a ``timedelta`` (as 0.9.1 takes it) or as seconds."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return float(value)


class _ResourceCredentials:
    """The boto3 resource's credentials, as the Rust store asks a session for them.

    The store calls ``get_credentials().get_frozen_credentials()`` whenever it
    needs credentials, so refreshable ones (an assumed role, SSO, instance
    metadata) are refreshed by botocore, never copied once.
    """

    def __init__(self, client):
        self._client = client
        self.region_name = client.meta.region_name

    def get_credentials(self):
        return self._client._get_credentials()


def _wire(value):
    """A value from boto3's TypeSerializer in the JSON the Rust store reads:
    binary values in base64 (the DynamoDB wire format)."""
    import base64

    ((tag, inner),) = value.items()
    if tag == "B":
        return {"B": base64.b64encode(bytes(inner)).decode("ascii")}
    if tag == "BS":
        return {"BS": [base64.b64encode(bytes(b)).decode("ascii") for b in inner]}
    if tag == "M":
        return {"M": {k: _wire(v) for k, v in inner.items()}}
    if tag == "L":
        return {"L": [_wire(v) for v in inner]}
    if tag in ("SS", "NS"):
        return {tag: list(inner)}
    return {tag: inner}


class DynamoDBLockClient:
    """
    Locks in a DynamoDB table of python-dynamodb-lock's layout, held by lease_lock's Rust
    client: heartbeats, takeover of crashed holders and conditional writes run there.
    """

    # default values for class properties
    _DEFAULT_TABLE_NAME = 'DynamoDBLockTable'
    _DEFAULT_PARTITION_KEY_NAME = 'lock_key'
    _DEFAULT_SORT_KEY_NAME = 'sort_key'
    _DEFAULT_TTL_ATTRIBUTE_NAME = 'expiry_time'
    _DEFAULT_HEARTBEAT_PERIOD = datetime.timedelta(seconds=5)
    _DEFAULT_SAFE_PERIOD = datetime.timedelta(seconds=20)
    _DEFAULT_LEASE_DURATION = datetime.timedelta(seconds=30)
    _DEFAULT_EXPIRY_PERIOD = datetime.timedelta(hours=1)
    _DEFAULT_HEARTBEAT_TPS = -1
    _DEFAULT_APP_CALLBACK_THREADPOOL_SIZE = 5

    # for optional create-table method
    _DEFAULT_READ_CAPACITY = 5
    _DEFAULT_WRITE_CAPACITY = 5

    # to help make the sort-key optional
    _DEFAULT_SORT_KEY_VALUE = '-'

    # DynamoDB "hard-coded" column names
    _COL_OWNER_NAME = 'owner_name'
    _COL_LEASE_DURATION = 'lease_duration'
    _COL_RECORD_VERSION_NUMBER = 'record_version_number'
    # this library's fencing token, beside them
    _COL_FENCE = 'fence'

    def __init__(self,
                 dynamodb_resource,
                 table_name=_DEFAULT_TABLE_NAME,
                 partition_key_name=_DEFAULT_PARTITION_KEY_NAME,
                 sort_key_name=_DEFAULT_SORT_KEY_NAME,
                 ttl_attribute_name=_DEFAULT_TTL_ATTRIBUTE_NAME,
                 owner_name=None,
                 heartbeat_period=_DEFAULT_HEARTBEAT_PERIOD,
                 safe_period=_DEFAULT_SAFE_PERIOD,
                 lease_duration=_DEFAULT_LEASE_DURATION,
                 expiry_period=_DEFAULT_EXPIRY_PERIOD,
                 heartbeat_tps=_DEFAULT_HEARTBEAT_TPS,
                 app_callback_executor=None,
                 keep_released_records=False,
                 max_clock_difference=None,
                 ):
        """
        :param boto3.ServiceResource dynamodb_resource: mandatory argument; its
                endpoint, region and credentials are used
        :param str table_name: defaults to 'DynamoDBLockTable'
        :param str partition_key_name: defaults to 'lock_key'
        :param str sort_key_name: defaults to 'sort_key'
        :param str ttl_attribute_name: defaults to 'expiry_time'
        :param str owner_name: defaults to hostname + _uuid
        :param datetime.timedelta heartbeat_period: How often each lock is heartbeaten.
                Defaults to 5 seconds.
        :param datetime.timedelta safe_period: How long a lock stays safe after its latest
                heartbeat landed; past it the lock is "in danger". Defaults to 20 seconds.
        :param datetime.timedelta lease_duration: The lease written with the lock: another
                client takes the lock over once it has seen no heartbeat for this long.
                Defaults to 30 seconds.
        :param datetime.timedelta expiry_period: How far ahead the TTL attribute is set, so
                that DynamoDB cleans up locks abandoned for good. Defaults to 1 hour (never
                less than twice the lease plus ten minutes).
        :param int heartbeat_tps: At most this many heartbeats per second from this client;
                -1 (the default) for no limit.
        :param ThreadPoolExecutor app_callback_executor: The executor that runs app_callbacks.
                Defaults to a ThreadPoolExecutor with a maximum of 5 threads.
        :param bool keep_released_records: Not in 0.9.1. If True, a release marks the item
                released (attribute ``released``) instead of deleting it, so that fences rise
                by 1 across releases whatever the hosts' clocks (a deleted item's next fence is
                the acquiring host's clock in microseconds since 1970, above the deleted one's
                only while the clocks differ by less than the time between a release and the next
                acquisition). python-dynamodb-lock 0.9.1 takes such an item for a held
                lock: turn it on once no process of that library uses the table. Defaults to False.
        :param datetime.timedelta max_clock_difference: Not in 0.9.1. The most any two hosts'
                clocks differ: with it, a lock whose holder crashed is taken over once its last
                write's time (``written_at``, which this client stamps on every write) plus the
                lease and this bound has passed, instead of after watching it unchanged for a
                lease. A host whose clock is off by more can take a live lock early. Locks
                written by python-dynamodb-lock 0.9.1 carry no such time and are watched.
                Defaults to None (always watch).

        Settings that cannot work (a heartbeat period not shorter than the safe period) raise
        ``lease_lock.ConfigError``. A safe period not shorter than the lease is taken as
        lease × 0.99 less a tenth of the lease (at most 1 s), with a warning.
        """
        self._uuid = uuid.uuid4().hex
        self._dynamodb_resource = dynamodb_resource
        self._table_name = table_name
        self._partition_key_name = partition_key_name
        self._sort_key_name = sort_key_name
        self._ttl_attribute_name = ttl_attribute_name
        self._owner_name = owner_name or (socket.getfqdn() + self._uuid)
        self._heartbeat_period = heartbeat_period
        self._safe_period = safe_period
        self._lease_duration = lease_duration
        self._expiry_period = expiry_period
        self._heartbeat_tps = heartbeat_tps
        self._app_callback_executor = app_callback_executor or ThreadPoolExecutor(
            max_workers=self._DEFAULT_APP_CALLBACK_THREADPOOL_SIZE,
            thread_name_prefix='DynamoDBLockClient-AC-' + self._uuid + "-"
        )

        # additional properties
        self._locks = {}
        self._shutting_down = False
        self._dynamodb_table = dynamodb_resource.Table(table_name)

        # the Rust client, on the same table, endpoint, region and credentials
        client = dynamodb_resource.meta.client
        self._store = _native.DynamoDBStore(
            table_name,
            layout="python-dynamodb-lock",
            partition_key=partition_key_name,
            sort_key=sort_key_name,
            expiry_attribute=ttl_attribute_name,
            expiry=_seconds(expiry_period),
            data_as_attributes=True,
            released_attribute='released' if keep_released_records else None,
            region=client.meta.region_name,
            endpoint_url=client.meta.endpoint_url,
            session=_ResourceCredentials(client),
        )
        lease = _seconds(lease_duration)
        safe = _seconds(safe_period)
        drift = 0.01
        if safe <= 0:
            raise _errors.ConfigError('safe_period must be positive, not %gs' % safe)
        # The Rust client trusts a lease for lease × (1 - drift) - margin after
        # the heartbeat that renewed it was sent: the margin that makes that
        # the safe period.
        margin = lease * (1 - drift) - safe
        if margin <= 0:
            # A safe period as long as the lease (0.9.1 accepts it, and then never reports
            # danger before the lease is over): danger starts a little before the end, as
            # with the Rust client's default margin, so that LOCK_IN_DANGER still comes first.
            margin = min(lease / 10, 1.0)
            logger.warning(
                'safe_period (%gs) is not shorter than lease_duration (%gs): a lock is in danger '
                '%gs after its latest heartbeat instead', safe, lease, lease * (1 - drift) - margin
            )
        self._safe_seconds = lease * (1 - drift) - margin
        tps = None
        if heartbeat_tps is not None and heartbeat_tps > 0:
            tps = max(1, _math.ceil(heartbeat_tps))
        self._client = _client.LockClient(
            self._store,
            owner=self._owner_name,
            lease=lease,
            heartbeat=_seconds(heartbeat_period),
            max_clock_drift=drift,
            safety_margin=margin,
            heartbeat_rate_limit=tps,
            max_clock_difference=(
                None if max_clock_difference is None else _seconds(max_clock_difference)
            ),
        )
        # attribute names of this library's own, refused as additional attributes ('released'
        # whether or not this client keeps released records: one that does reads it)
        self._reserved = (self._COL_FENCE, 'released', 'written_at')
        # a client for releases after close(release_locks=False), made when first needed
        self._late_client = None
        self._late_client_lock = threading.Lock()
        self._close_lock = threading.Lock()

        # and, initialization
        self._checker_wakeup = threading.Event()
        self._start_heartbeat_checker_thread()
        logger.info('Created: %s', str(self))

    def _start_heartbeat_checker_thread(self):
        """
        Creates and starts a daemon thread - that turns the locks' lease states into
        statuses and app_callbacks (the heartbeats themselves run in the Rust client)
        """
        self._heartbeat_checker_thread = threading.Thread(
            name='DynamoDBLockClient-HC-' + self._uuid,
            target=self._check_heartbeat_loop
        )
        self._heartbeat_checker_thread.daemon = True
        self._heartbeat_checker_thread.start()
        logger.info('Started the heartbeat-checker thread: %s', str(self._heartbeat_checker_thread))

    def _check_period(self):
        # Often enough that a status lags its lease state by little: at most a
        # second, and never less often than 0.9.1 checks (every heartbeat period).
        return max(0.01, min(_seconds(self._heartbeat_period), self._safe_seconds / 4, 1.0))

    def _check_heartbeat_loop(self):
        """
        Keeps checking the locks' lease states until the client is closed.
        """
        period = self._check_period()
        while not self._shutting_down:
            for uid, lock in self._locks.copy().items():
                self._check_heartbeat(lock)
            self._checker_wakeup.wait(period)

    def _check_heartbeat(self, lock):
        """
        Turns a lock's lease state into its status, calling the app_callback on a change:

        1) LOCK_STOLEN: the lease is lost (another writer took the lock, it was released or
            deleted behind this client's back, or no heartbeat landed within the lease).
            The status becomes INVALID and the lock is dropped; the app should abort.
        2) LOCK_IN_DANGER: no heartbeat has landed within the safe period. The app should
            finish or roll back quickly and release the lock. Heartbeats go on: if one
            lands, the status is LOCKED again.
        """
        with lock.thread_lock:
            try:
                if self._locks.get(lock.unique_identifier) is not lock:
                    return
                if lock.status not in (DynamoDBLock.LOCKED, DynamoDBLock.IN_DANGER):
                    return
                # vars(lock) follows the heartbeats too, as 0.9.1's does.
                lock._refresh()
                state = lock._native.state
                if state == _LeaseState.LOST:
                    logger.warning('Lock was lost (%s): %s', lock._native.lost_reason, lock.unique_identifier)
                    lock.status = DynamoDBLock.INVALID
                    del self._locks[lock.unique_identifier]
                    self._call_app_callback(lock, DynamoDBLockError.LOCK_STOLEN)
                elif state == _LeaseState.IN_DANGER:
                    if lock.status == DynamoDBLock.LOCKED:
                        logger.warning('Lock is in danger: %s', lock.unique_identifier)
                        lock.status = DynamoDBLock.IN_DANGER
                        self._call_app_callback(lock, DynamoDBLockError.LOCK_IN_DANGER)
                elif lock.status == DynamoDBLock.IN_DANGER:
                    logger.info('Lock is safe again: %s', lock.unique_identifier)
                    lock.status = DynamoDBLock.LOCKED
            except Exception:
                logger.warning('Unexpected error while checking heartbeat: %s', lock.unique_identifier, exc_info=True)

    def _call_app_callback(self, lock, code):
        """
        Run ``lock.app_callback(code, lock)`` on the app_callback executor (a lock without
        a callback is skipped); what the callback raises stays in its future, as in 0.9.1.
        """
        if lock.app_callback is not None:
            self._app_callback_executor.submit(lock.app_callback, code, lock)

    def _additional_attributes(self, additional_attributes):
        """The lock's additional attributes as the Rust store takes them (or None)."""
        if not additional_attributes:
            return b'{}'
        import json
        from boto3.dynamodb.types import TypeSerializer

        # The lock's own attributes win over additional ones of the same name,
        # as in 0.9.1 (which writes them over); this library's own are refused.
        fixed = {
            self._partition_key_name, self._sort_key_name, self._COL_OWNER_NAME,
            self._COL_LEASE_DURATION, self._COL_RECORD_VERSION_NUMBER, self._ttl_attribute_name,
        }
        for name in self._reserved:
            if name in additional_attributes:
                raise DynamoDBLockError(
                    DynamoDBLockError.UNKNOWN,
                    "additional attribute %r is an attribute of the lock itself: rename it" % name,
                )
        serializer = TypeSerializer()
        wire = {
            name: _wire(serializer.serialize(value))
            for name, value in additional_attributes.items()
            if name not in fixed
        }
        return json.dumps(wire).encode('utf-8')

    def acquire_lock(self,
                     partition_key,
                     sort_key=_DEFAULT_SORT_KEY_VALUE,
                     retry_period=None,
                     retry_timeout=None,
                     additional_attributes=None,
                     app_callback=None,
                     ):
        """
        Acquires a distributed DynamoDBLock for the given key(s).

        Waits while the lock is held by another client: until it is released, until its
        holder has not heartbeaten for its lease (then takes it over), or until
        retry_timeout, when a DynamoDBLockError with code ACQUIRE_TIMEOUT is raised. Any
        other error is raised as a DynamoDBLockError with code UNKNOWN.

        :param str partition_key: The primary lock identifier
        :param str sort_key: Forms a "composite identifier" along with the partition_key. Defaults to '-'
        :param datetime.timedelta retry_period: If the lock is not immediately available, how long
                should we wait between retries? Defaults to heartbeat_period.
        :param datetime.timedelta retry_timeout: How long to keep trying before giving up.
                Defaults to lease_duration + heartbeat_period.
        :param dict additional_attributes: Arbitrary application metadata to be stored with the lock
                (as top-level attributes of the item)
        :param Callable app_callback: Called as app_callback(code, lock) on the app_callback_executor
                when the lock is in danger (LOCK_IN_DANGER) or lost (LOCK_STOLEN)
        :rtype: DynamoDBLock
        :return: A distributed lock instance
        """
        logger.info('Trying to acquire lock for: %s, %s', partition_key, sort_key)

        # plug in default values as needed
        if not retry_period: retry_period = self._heartbeat_period
        if not retry_timeout:
            retry_timeout = _seconds(self._lease_duration) + _seconds(self._heartbeat_period)

        if self._shutting_down:
            raise DynamoDBLockError(DynamoDBLockError.CLIENT_SHUTDOWN, 'Client already shut down')

        # create the "new" lock that needs to be acquired
        new_lock = DynamoDBLock(
            partition_key=partition_key,
            sort_key=sort_key,
            owner_name=self._owner_name,
            lease_duration=_seconds(self._lease_duration),
            record_version_number=None,
            expiry_time=None,
            additional_attributes=additional_attributes,
            app_callback=app_callback,
            lock_client=self,
        )
        try:
            data = self._additional_attributes(additional_attributes)
            native = self._client.acquire(
                partition_key,
                sort_key=None if sort_key == self._DEFAULT_SORT_KEY_VALUE else sort_key,
                wait=_seconds(retry_timeout),
                refresh=_seconds(retry_period),
                data=data,
            )
        except DynamoDBLockError:
            raise
        except _errors.AcquireTimeout:
            raise DynamoDBLockError(
                DynamoDBLockError.ACQUIRE_TIMEOUT,
                'acquire_lock() timed out: ' + new_lock.unique_identifier
            )
        except _errors.ClientClosed:
            raise DynamoDBLockError(DynamoDBLockError.CLIENT_SHUTDOWN, 'Client already shut down')
        except Exception as e:
            raise DynamoDBLockError(DynamoDBLockError.UNKNOWN, str(e))
        new_lock._attach(native, self._expiry_seconds())
        with new_lock.thread_lock:
            new_lock.status = DynamoDBLock.LOCKED
            self._locks[new_lock.unique_identifier] = new_lock
        if self._shutting_down:
            # closed while this acquire waited: leave nothing held
            self.release_lock(new_lock, best_effort=True)
            raise DynamoDBLockError(DynamoDBLockError.CLIENT_SHUTDOWN, 'Client already shut down')
        logger.info('Successfully acquired the lock: %s', new_lock.unique_identifier)
        return new_lock

    def _expiry_seconds(self):
        """How far ahead the store writes the TTL attribute (see Layout::with_default_expiry)."""
        lease = _seconds(self._lease_duration)
        return max(_seconds(self._expiry_period), 2 * lease + 600)

    def release_lock(self, lock, best_effort=True):
        """
        Releases the given lock - by deleting it from the database, if it still has the
        version this client last wrote.

        :param DynamoDBLock lock: The lock instance that needs to be released
        :param bool best_effort: If True, any error is logged and swallowed (the lock then
                expires after its lease). If False, a lock not held by this client raises
                LOCK_NOT_OWNED, one taken by someone else LOCK_STOLEN, any other error UNKNOWN.
        """
        logger.info('Releasing the lock: %s', str(lock))
        with lock.thread_lock:
            try:
                # if the lock is not in a locked state, it's a no-op (i.e. released or stolen/invalid)
                if lock.status not in [DynamoDBLock.LOCKED, DynamoDBLock.IN_DANGER]:
                    logger.info('Skipping the release as the lock is not locked any more: %s', lock.status)
                    return
                # if this client did not create the lock being released
                if self._locks.get(lock.unique_identifier) is not lock:
                    if best_effort:
                        logger.warning('Lock not owned by this client: %s', str(lock))
                        return
                    raise DynamoDBLockError(DynamoDBLockError.LOCK_NOT_OWNED, 'Lock is not owned by this client')
                # first, forget it: its status says released whatever the store answers
                lock.status = DynamoDBLock.RELEASED
                del self._locks[lock.unique_identifier]
                if lock._detached_version is not None:
                    self._release_detached(lock)
                else:
                    lock._native.release()
                logger.info('Successfully released the lock: %s', lock.unique_identifier)
            except DynamoDBLockError:
                raise
            except (_errors.LockLost, _errors.NotOwned):
                if best_effort:
                    logger.warning('Lock was taken by someone else before its release: %s', lock.unique_identifier)
                else:
                    raise DynamoDBLockError(DynamoDBLockError.LOCK_STOLEN, 'Lock was stolen by someone else')
            except Exception as e:
                if best_effort:
                    logger.warning('Error while releasing lock: %s', lock.unique_identifier, exc_info=True)
                else:
                    raise DynamoDBLockError(DynamoDBLockError.UNKNOWN, str(e))

    def _release_detached(self, lock):
        """Release a lock close() stopped heartbeating, by its last version."""
        with self._late_client_lock:
            if self._late_client is None:
                self._late_client = _client.LockClient(self._store, owner=self._owner_name)
        sort_key = None if lock.sort_key == self._DEFAULT_SORT_KEY_VALUE else lock.sort_key
        self._late_client.release_version(lock.partition_key, lock._detached_version, sort_key=sort_key)

    def _release_all_locks(self):
        """
        Iterates over all the locks and releases each one.
        """
        logger.info('Releasing all locks: %d', len(self._locks))
        for uid, lock in self._locks.copy().items():
            self.release_lock(lock, best_effort=True)

    def close(self, release_locks=False):
        """
        Stops heartbeating - and releases all locks if so asked.

        By default, this method will NOT release the locks: releasing them while the
        application is still working under them is dangerous. They stay in the table, no
        longer heartbeaten, and other clients take them over once their lease has passed;
        release_lock() still releases them. An acquire_lock() waiting when the client closes,
        and any later one, raises CLIENT_SHUTDOWN.

        :param bool release_locks: if True, releases all the locks. Defaults to False.
        """
        with self._close_lock:
            if self._shutting_down: return
            self._shutting_down = True
        logger.info('Shutting down')
        self._checker_wakeup.set()
        if threading.current_thread() is not self._heartbeat_checker_thread:
            self._heartbeat_checker_thread.join()
        if release_locks:
            self._release_all_locks()
        else:
            for uid, lock in self._locks.copy().items():
                with lock.thread_lock:
                    if self._locks.get(uid) is not lock:
                        continue  # released meanwhile
                    try:
                        lock._detached_version = lock._native.detach()
                    except Exception:
                        # lost already: what the checker would have made of it
                        logger.warning('Lock was lost before the client closed: %s', uid, exc_info=True)
                        lock.status = DynamoDBLock.INVALID
                        del self._locks[uid]
        # wakes acquires still waiting (they raise CLIENT_SHUTDOWN)
        report = self._client.close()
        _client._log_report('closing the DynamoDBLockClient', report)

    def __str__(self):
        """
        The class name and the instance's attributes.
        """
        return '%s::%s' % (self.__class__.__name__, self.__dict__)

    @classmethod
    def create_dynamodb_table(cls,
                              dynamodb_client,
                              table_name=_DEFAULT_TABLE_NAME,
                              partition_key_name=_DEFAULT_PARTITION_KEY_NAME,
                              sort_key_name=_DEFAULT_SORT_KEY_NAME,
                              ttl_attribute_name=_DEFAULT_TTL_ATTRIBUTE_NAME,
                              read_capacity=_DEFAULT_READ_CAPACITY,
                              write_capacity=_DEFAULT_WRITE_CAPACITY):
        """
        Helper method to create the DynamoDB table (provisioned throughput, time to live on
        the TTL attribute), waiting until it is active.

        :param boto3.DynamoDB.Client dynamodb_client: a boto3 client (not a resource)
        :param str table_name: the table (default 'DynamoDBLockTable')
        :param str partition_key_name: its hash key (default 'lock_key')
        :param str sort_key_name: its range key (default 'sort_key')
        :param str ttl_attribute_name: its time-to-live attribute (default 'expiry_time')
        :param int read_capacity: provisioned read capacity units (default 5)
        :param int write_capacity: provisioned write capacity units (default 5)
        """
        logger.info("Creating the lock table: %s", table_name)
        dynamodb_client.create_table(
            TableName=table_name,
            KeySchema=[
                {'AttributeName': partition_key_name, 'KeyType': 'HASH'},
                {'AttributeName': sort_key_name, 'KeyType': 'RANGE'},
            ],
            AttributeDefinitions=[
                {'AttributeName': partition_key_name, 'AttributeType': 'S'},
                {'AttributeName': sort_key_name, 'AttributeType': 'S'},
            ],
            ProvisionedThroughput={
                'ReadCapacityUnits': read_capacity,
                'WriteCapacityUnits': write_capacity,
            },
        )
        cls._wait_for_table_to_be_active(dynamodb_client, table_name)
        logger.info("Updating the table with time_to_live configuration")
        dynamodb_client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={'Enabled': True, 'AttributeName': ttl_attribute_name},
        )
        cls._wait_for_table_to_be_active(dynamodb_client, table_name)

    @classmethod
    def _wait_for_table_to_be_active(cls, dynamodb_client, table_name):
        logger.info("Waiting till the table becomes ACTIVE")
        while True:
            response = dynamodb_client.describe_table(TableName=table_name)
            status = response.get('Table', {}).get('TableStatus', 'UNKNOWN')
            logger.info("Table status: %s", status)
            if status == 'ACTIVE':
                break
            time.sleep(2)


class BaseDynamoDBLock:
    """
    A lock's fields as the table holds them.
    """

    def __init__(self,
                 partition_key,
                 sort_key,
                 owner_name,
                 lease_duration,
                 record_version_number,
                 expiry_time,
                 additional_attributes
                 ):
        """
        :param str partition_key: the lock's key
        :param str sort_key: the sort key under the partition key ('-' when there is none)
        :param str owner_name: the holder's owner name
        :param float lease_duration: the lease written with the lock, in seconds
        :param str record_version_number: the record's version, new with each heartbeat
        :param int expiry_time: the TTL time (epoch seconds) DynamoDB may delete the item after
        :param dict additional_attributes: application data kept as the item's other attributes
        """
        self.partition_key = partition_key
        self.sort_key = sort_key
        self.owner_name = owner_name
        self.lease_duration = lease_duration
        self.record_version_number = record_version_number
        self.expiry_time = expiry_time
        self.additional_attributes = additional_attributes or {}
        # additional properties
        self.unique_identifier = quote(partition_key) + '|' + quote(sort_key)

    def __str__(self):
        """
        The class name and the instance's attributes.
        """
        return '%s::%s' % (self.__class__.__name__, self.__dict__)


# The lock attributes 0.9.1 updates at each heartbeat; here plain instance
# attributes too (``vars(lock)`` shows them), brought up to date with the Rust
# client's heartbeats whenever one is read (``DynamoDBLock.__getattribute__``)
# and by the heartbeat checker.
_FOLLOWS_HEARTBEATS = frozenset({'record_version_number', 'expiry_time', 'last_updated_time'})


class DynamoDBLock(BaseDynamoDBLock):
    """
    A lock held by a DynamoDBLockClient of this process.

    Beyond 0.9.1's attributes it has ``fence``: the fencing token of this acquisition,
    higher than every earlier holder's. An item created where none is (a new key, or one
    deleted by a release, a time to live or by hand) starts at the acquiring host's clock in
    microseconds since 1970, which stays above the deleted item's fences as long as the clock
    of the host that creates the item again is not behind the one that created it before by
    more than the time between the two creations. Hand it to the resource the lock protects and have it refuse lower ones.
    """

    PENDING = 'PENDING'
    LOCKED = 'LOCKED'
    RELEASED = 'RELEASED'
    IN_DANGER = 'IN_DANGER'
    INVALID = 'INVALID'

    def __init__(self,
                 partition_key,
                 sort_key,
                 owner_name,
                 lease_duration,
                 record_version_number,
                 expiry_time,
                 additional_attributes,
                 app_callback,
                 lock_client,
                 ):
        """
        The fields of BaseDynamoDBLock, and:

        :param Callable app_callback: called as app_callback(code, lock) when the lock is in
                danger or lost
        :param DynamoDBLockClient lock_client: the client holding the lock
        """
        self._native = None
        self._detached_version = None
        self._expiry_ahead = None
        self._seen_version = None
        BaseDynamoDBLock.__init__(self,
                                  partition_key,
                                  sort_key,
                                  owner_name,
                                  lease_duration,
                                  record_version_number,
                                  expiry_time,
                                  additional_attributes
                                  )
        self.app_callback = app_callback
        self.lock_client = lock_client
        # additional properties
        self.last_updated_time = time.monotonic()
        self.thread_lock = threading.RLock()
        self.status = self.PENDING

    def _attach(self, native, expiry_ahead):
        """Bind the Rust client's held lock (after a successful acquire)."""
        self._native = native
        self._expiry_ahead = expiry_ahead
        self._refresh()

    def _refresh(self):
        """Follow the heartbeats: version, expiry time and last update, as 0.9.1 keeps them."""
        native = self._native
        if native is None or not native.held:
            return
        version = native.version
        if version == self._seen_version:
            return
        # A new heartbeat: its version, the expiry it wrote, and when it
        # landed (worked back from the safe time it left).
        self._seen_version = version
        self.record_version_number = version
        self.expiry_time = int(time.time() + self._expiry_ahead)
        remaining = native.remaining
        if remaining > 0:
            safe = self.lock_client._safe_seconds
            self.last_updated_time = time.monotonic() - max(safe - remaining, 0.0)

    def __getattribute__(self, name):
        # record_version_number, expiry_time and last_updated_time are plain
        # attributes, as in 0.9.1; read, they first catch up with the heartbeats.
        if name in _FOLLOWS_HEARTBEATS:
            object.__getattribute__(self, '_refresh')()
        return object.__getattribute__(self, name)

    @property
    def fence(self):
        """The fencing token of this acquisition (None before it is acquired)."""
        return None if self._native is None else self._native.fence

    def __enter__(self):
        """
        The lock is held already: returns it.
        """
        logger.debug('Entering: %s', self.unique_identifier)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        """
        Releases the lock - with best_effort=True. An exception raised in the block
        propagates (0.9.1 swallows it).
        """
        logger.debug('Exiting: %s', self.unique_identifier)
        self.release(best_effort=True)
        return False

    def release(self, best_effort=True):
        """
        ``lock_client.release_lock(self, best_effort)``: with ``best_effort`` (the default)
        errors are logged, not raised; the item then expires after its lease.
        """
        logger.debug('Releasing: %s', self.unique_identifier)
        self.lock_client.release_lock(self, best_effort)


class DynamoDBLockError(Exception):
    """
    What acquire_lock and release_lock raise: ``code`` (one of the constants below) says
    which failure, ``message`` the details.
    """

    # code-constants
    CLIENT_SHUTDOWN = 'CLIENT_SHUTDOWN'
    ACQUIRE_TIMEOUT = 'ACQUIRE_TIMEOUT'
    LOCK_NOT_OWNED = 'LOCK_NOT_OWNED'
    LOCK_STOLEN = 'LOCK_STOLEN'
    LOCK_IN_DANGER = 'LOCK_IN_DANGER'
    UNKNOWN = 'UNKNOWN'

    def __init__(self,
                 code='UNKNOWN',
                 message='Unknown error'
                 ):
        Exception.__init__(self)
        self.code = code
        self.message = message

    def __str__(self):
        """
        ``DynamoDBLockError: CODE - message``.
        """
        return "%s: %s - %s" % (self.__class__.__name__, self.code, self.message)
