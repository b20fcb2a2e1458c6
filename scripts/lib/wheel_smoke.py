"""The check every built lease_lock wheel (and the sdist, once installed)
passes on its own platform: the extension imports, and a lock is taken,
trusted and released on the in-process store, from threads' code and from
asyncio. Run with the interpreter the wheel is installed in:

    python scripts/lib/wheel_smoke.py

It needs nothing but the installed package (no server, no network).
"""

import asyncio
import platform

import lease_lock


def main() -> None:
    client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="smoke")
    try:
        with client.lock("job", wait=0) as first:
            assert first.is_safe, "a lock just taken is trusted"
        with client.lock("job", wait=0) as second:
            assert second.fence > first.fence, (first.fence, second.fence)

        async def in_a_task() -> int:
            async with client.lock("job", wait=0) as lock:
                assert lock.is_safe
                return lock.fence

        fence = asyncio.run(in_a_task())
        assert fence > second.fence, (second.fence, fence)
    finally:
        client.close()
    print(
        f"lease_lock {lease_lock.__version__} on {platform.system()} {platform.machine()} "
        f"(Python {platform.python_version()}): fences {first.fence}, {second.fence}, {fence}"
    )


if __name__ == "__main__":
    main()
