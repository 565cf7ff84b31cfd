"""Process lifecycle: parse, resolve, listen, turn ready after the startup delay, drain on SIGTERM, exit."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web

from .cli import log_unmodelled, parse_args, strip_serve_word
from .config import EngineConfig, StartupError, resolve_config
from .engine import Engine
from .server import Api
from .settings import SimSettings

logger = logging.getLogger("sglang_sim")


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stdout,
        force=True,
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


async def serve(cfg: EngineConfig) -> int:
    engine = Engine(cfg)
    api = Api(engine)
    runner = web.AppRunner(api.build_app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    host, port = str(cfg.args["host"]), int(cfg.args["port"])
    try:
        await web.TCPSite(runner, host, port, backlog=4096).start()
        await engine.start()
        engine.set_profile(cfg.settings.profile)
    except OSError as e:
        logger.error(f"Cannot listen: {e}")
        await engine.stop()
        await runner.cleanup()
        return 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    lim = cfg.limits
    mem = lim.memory_usage
    free_gb = float(mem.get("startup_available", 0.0)) - float(mem.get("weight", 0.0)) - float(mem.get("kvcache", 0.0))
    logger.info(
        f"max_total_num_tokens={lim.max_total_num_tokens}, "
        f"chunked_prefill_size={cfg.args['chunked_prefill_size']}, "
        f"max_prefill_tokens={cfg.args['max_prefill_tokens']}, "
        f"max_running_requests={lim.max_running_requests}, "
        f"context_len={lim.context_len}, "
        f"available_gpu_mem={free_gb:.2f} GB"
    )
    logger.info(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")

    delay = cfg.settings.startup_delay_s
    if cfg.settings.never_ready:
        logger.warning("SGLANG_SIM_NEVER_READY=1: /health answers 503 until the process stops")
        await stop.wait()
    elif delay > 0:
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except TimeoutError:
            pass
    if not stop.is_set():
        engine.mark_ready()
        logger.info("The server is fired up and ready to roll!")
        crash = cfg.settings.crash_after_s
        try:
            await asyncio.wait_for(stop.wait(), crash if crash > 0 else None)
        except TimeoutError:
            logger.error(f"SGLANG_SIM_CRASH_AFTER_S={crash:g}: simulated crash {crash:g} s after turning ready")
            await runner.cleanup()
            await engine.stop()
            return 1

    engine.begin_shutdown()
    timeout = cfg.settings.shutdown_timeout_s
    remaining = sum(len(s.waiting) + len(s.active) for s in engine.schedulers)
    logger.info(f"Gracefully exiting... Remaining number of requests {remaining}.")
    if not await engine.drain(timeout):
        left = sum(len(s.waiting) + len(s.active) for s in engine.schedulers)
        logger.warning(f"{left} requests still running after {timeout:.0f} s; exiting anyway.")
    await runner.cleanup()
    await engine.stop()
    logger.info("Shutdown complete.")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    setup_logging("info")
    modelled, unmodelled = parse_args(args)  # exits 2 on a parse error, like argparse in SGLang
    setup_logging(str(modelled["log_level"]))
    try:
        settings = SimSettings.from_env()
        cfg = resolve_config(modelled, unmodelled, strip_serve_word(args), settings)
    except (StartupError, ValueError) as e:
        logger.error(f"Failed to start the engine: {e}")
        return 1
    log_unmodelled(unmodelled)
    return asyncio.run(serve(cfg))
