"""The exceptions of the package's libfsa calls (fsa_jit re-exports both). Apart from the code that raises
them, so that loading (_lib) and calling (_functions) share them without importing each other.
"""


class FsaLibraryNotFound(OSError):
    """libfsa could not be found or loaded."""


class FsaError(RuntimeError):
    """A libfsa call returned a status other than FSA_STATUS_OK."""

    def __init__(self, status, name, message, function=None, info=None):
        self.status = status
        self.name = name  # "FSA_STATUS_UNSUPPORTED"
        self.message = message  # fsa_last_error()
        self.function = function
        self.info = info or {}  # fsa_last_error_info() fields
        where = f"{function}: " if function else ""
        super().__init__(f"{where}{name} ({status}): {message}")

    def __reduce__(self):
        # args holds only the formatted text, which __init__ does not take: pickle and copy rebuild the
        # error from its fields instead (extra attributes, such as prune's removed, ride in __dict__).
        return type(self), (self.status, self.name, self.message, self.function, self.info), self.__dict__
