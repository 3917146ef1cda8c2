from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetNodeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNodeReply(_message.Message):
    __slots__ = ("node_json",)
    NODE_JSON_FIELD_NUMBER: _ClassVar[int]
    node_json: str
    def __init__(self, node_json: _Optional[str] = ...) -> None: ...

class PatchNodeRequest(_message.Message):
    __slots__ = ("patch_type", "patch")
    PATCH_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    patch_type: str
    patch: bytes
    def __init__(self, patch_type: _Optional[str] = ..., patch: _Optional[bytes] = ...) -> None: ...

class PatchNodeReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateNodeCapacityRequest(_message.Message):
    __slots__ = ("capacities",)
    class CapacitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CAPACITIES_FIELD_NUMBER: _ClassVar[int]
    capacities: _containers.ScalarMap[str, str]
    def __init__(self, capacities: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateNodeCapacityReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeTaint(_message.Message):
    __slots__ = ("key", "value", "effect")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    effect: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ..., effect: _Optional[str] = ...) -> None: ...

class SetNodeResourcesRequest(_message.Message):
    __slots__ = ("capacity", "labels", "taints")
    class CapacityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TAINTS_FIELD_NUMBER: _ClassVar[int]
    capacity: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    taints: _containers.RepeatedCompositeFieldContainer[NodeTaint]
    def __init__(self, capacity: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., taints: _Optional[_Iterable[_Union[NodeTaint, _Mapping]]] = ...) -> None: ...

class SetNodeResourcesReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthCheckRequest(_message.Message):
    __slots__ = ("query",)
    QUERY_FIELD_NUMBER: _ClassVar[int]
    query: str
    def __init__(self, query: _Optional[str] = ...) -> None: ...

class HealthCheckReply(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: str
    def __init__(self, error: _Optional[str] = ...) -> None: ...
