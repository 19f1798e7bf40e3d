"""Pickled messages between the run's owner and a worker process over two OS pipes, one
each way, read and written by the event loop: neither side ever blocks its loop on the
other, so a worker busy sending a report and an owner sending rows cannot wait on each
other. (Sending from a thread instead, to the same effect, cost the owner a thread hand-off
per message: 0.29 s of its 6.3 s in a 10,000-row run of bench/workers.py.)
"""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
from multiprocessing.connection import Connection
from typing import Any

FRAME = struct.Struct("!Q")  # each message: its length, then its pickle
FLUSH_WAIT = 10.0  # seconds a closing side waits for its last messages to leave


class MessagePipe:
    """One end: messages in from `inbound`, out to `outbound` (the two halves of two
    `multiprocessing.Pipe(duplex=False)`, which carry the descriptors to the worker process)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        reading: asyncio.ReadTransport,
        writer: asyncio.WriteTransport,
        ends: tuple[Connection, Connection],
    ) -> None:
        self._reader, self._reading, self._writer = reader, reading, writer
        self._ends = ends

    @classmethod
    async def open(cls, inbound: Connection, outbound: Connection) -> MessagePipe:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        # closefd=False: the Connections own the descriptors and close them in `close`.
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
            os.fdopen(inbound.fileno(), "rb", buffering=0, closefd=False),
        )
        writer, _ = await loop.connect_write_pipe(
            asyncio.BaseProtocol, os.fdopen(outbound.fileno(), "wb", buffering=0, closefd=False)
        )
        return cls(reader, reading, writer, (inbound, outbound))

    def send(self, message: Any) -> bool:
        """Queue `message` for the other side; False when that side is gone."""
        if self._writer.is_closing():
            return False
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._writer.write(FRAME.pack(len(data)) + data)
        return True

    async def receive(self) -> Any:
        """The next message; EOFError when the other side has closed or died."""
        try:
            size = FRAME.unpack(await self._reader.readexactly(FRAME.size))[0]
            return pickle.loads(await self._reader.readexactly(size))
        except asyncio.IncompleteReadError:
            raise EOFError from None

    async def close(self) -> None:
        """Let queued messages leave (briefly), then close both descriptors."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FLUSH_WAIT
        while (
            not self._writer.is_closing()
            and self._writer.get_write_buffer_size()
            and loop.time() < deadline
        ):
            await asyncio.sleep(0.01)
        self._writer.close()
        self._reading.close()
        await asyncio.sleep(0)  # the transports let go of the descriptors
        for end in self._ends:
            end.close()
