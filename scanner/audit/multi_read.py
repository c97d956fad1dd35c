"""Many znodes in one ZooKeeper request: the server's ``multiRead`` (3.6+), which kazoo does not offer.

kazoo pipelines single reads, but pays a wake-up of its I/O thread and a Python object per request
(about 5,000 znodes/s a client). One ``multiRead`` of a few hundred ``getData`` operations is one
request and one answer: the per-request cost is paid once per batch.
"""

from __future__ import annotations

from collections import namedtuple

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import GetData, MultiHeader, int_struct, multiheader_struct, read_buffer, stat_struct
from kazoo.protocol.states import ZnodeStat

MULTI_READ = 22  # ZooDefs.OpCode.multiRead
ERROR = -1  # ZooDefs.OpCode.error: the operation's answer is an error code


class MultiRead(namedtuple("MultiRead", "operations")):
    """A kazoo request: ``getData`` of every path in ``operations``, answered in one response."""

    type = MULTI_READ

    def serialize(self) -> bytearray:
        body = bytearray()
        for path in self.operations:
            body += MultiHeader(GetData.type, False, -1).serialize() + GetData(path, None).serialize()
        return body + multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list:
        """One (data, ZnodeStat) or exception instance per operation, in order."""
        results = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GetData.type:
                value, offset = read_buffer(data, offset)
                result = (value, ZnodeStat._make(stat_struct.unpack_from(data, offset)))
                offset += stat_struct.size
            elif header.type == ERROR:
                code = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                result = EXCEPTIONS[code]()
            else:
                raise ValueError(f"multiRead answered an operation of type {header.type}, expected getData")
            results.append(result)
            header, offset = MultiHeader.deserialize(data, offset)
        return results


def read_nodes_async(client, paths: list[str]):
    """Send one ``multiRead`` of ``paths`` on kazoo ``client`` (chroot applied); returns its async result.

    Its ``get()`` is a list, per path, of ``(data, ZnodeStat)`` or None when the znode does not exist;
    any other error of an operation is raised.
    """
    result = client.handler.async_result()
    client._call(MultiRead([client.chroot + path for path in paths]), result)  # noqa: SLF001 (kazoo's request queue)
    return _Answers(result)


class _Answers:
    def __init__(self, result):
        self._result = result

    def get(self, timeout: float | None = None) -> list:
        answers = []
        for answer in self._result.get(timeout=timeout):
            if isinstance(answer, NoNodeError):
                answers.append(None)
            elif isinstance(answer, Exception):
                raise answer
            else:
                answers.append(answer)
        return answers
