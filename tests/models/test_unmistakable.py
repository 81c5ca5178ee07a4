"""The shipped classifier gets unmistakable functions right in all four languages."""

from __future__ import annotations

import pytest

from crystalperf.core.attribution.classify import FunctionSource, ResourceClassifier, load_classifier
from crystalperf.models.classifier import NeuralClassifier

SOCKET_SEND = {
    "java": """
public void sendAll(java.net.Socket socket, byte[][] packets) throws java.io.IOException {
    java.io.OutputStream out = socket.getOutputStream();
    for (byte[] packet : packets) {
        out.write(packet);
    }
    out.flush();
}""",
    "scala": """
def sendAll(socket: java.net.Socket, packets: Seq[Array[Byte]]): Unit = {
  val out = socket.getOutputStream
  for (packet <- packets) {
    out.write(packet)
  }
  out.flush()
}""",
    "python": """
def send_all(sock, packets):
    for packet in packets:
        sock.sendall(packet)
    sock.shutdown(socket.SHUT_WR)
""",
    "cpp": """
void sendAll(int sockfd, const std::vector<std::string>& packets) {
    for (const auto& packet : packets) {
        send(sockfd, packet.data(), packet.size(), 0);
    }
    shutdown(sockfd, SHUT_WR);
}""",
}

FILE_WRITE = {
    "java": """
public void writeLines(java.io.File file, java.util.List<String> lines) throws java.io.IOException {
    try (java.io.FileWriter writer = new java.io.FileWriter(file)) {
        for (String line : lines) {
            writer.write(line);
        }
        writer.flush();
    }
}""",
    "scala": """
def writeLines(file: java.io.File, lines: Seq[String]): Unit = {
  val writer = new java.io.FileWriter(file)
  try {
    for (line <- lines) writer.write(line)
    writer.flush()
  } finally writer.close()
}""",
    "python": """
def write_lines(path, lines):
    with open(path, "w") as file:
        for line in lines:
            file.write(line)
        file.flush()
        os.fsync(file.fileno())
""",
    "cpp": """
void writeLines(const std::string& path, const std::vector<std::string>& lines) {
    FILE* file = fopen(path.c_str(), "w");
    for (const auto& line : lines) {
        fwrite(line.data(), 1, line.size(), file);
    }
    fflush(file);
    fclose(file);
}""",
}

CHECKSUM = {
    "java": """
public static int checksum(byte[] data) {
    int sum = 0;
    for (int i = 0; i < data.length; i++) {
        sum = (sum * 31 + (data[i] & 0xff)) % 65521;
    }
    return sum;
}""",
    "scala": """
def checksum(data: Array[Byte]): Int = {
  var sum = 0
  var i = 0
  while (i < data.length) {
    sum = (sum * 31 + (data(i) & 0xff)) % 65521
    i += 1
  }
  sum
}""",
    "python": """
def checksum(data):
    total = 0
    for value in data:
        total = (total * 31 + value) % 65521
    return total
""",
    "cpp": """
uint32_t checksum(const uint8_t* data, size_t length) {
    uint32_t sum = 0;
    for (size_t i = 0; i < length; ++i) {
        sum = (sum * 31 + data[i]) % 65521;
    }
    return sum;
}""",
}

CASES = [
    (resource, language, code)
    for resource, table in (("network", SOCKET_SEND), ("disk", FILE_WRITE), ("cpu", CHECKSUM))
    for language, code in table.items()
]


@pytest.fixture(scope="module")
def neural() -> NeuralClassifier:
    return NeuralClassifier()


@pytest.mark.parametrize(("resource", "language", "code"), CASES, ids=[f"{r}-{lang}" for r, lang, _ in CASES])
def test_arg_max_of_unmistakable_function(
    neural: NeuralClassifier, resource: str, language: str, code: str
) -> None:
    [vector] = neural.classify([FunctionSource(f"example.{resource}", language, code)])
    assert vector.dominant() == resource, vector
    assert abs(sum(vector) - 1.0) < 1e-6


DOCS = {
    "network": "Sends bytes over the socket.",
    "disk": "Writes the lines to the file and flushes it.",
    "cpu": "Computes a checksum of the data.",
}


@pytest.mark.parametrize(("resource", "language", "code"), CASES, ids=[f"{r}-{lang}" for r, lang, _ in CASES])
def test_arg_max_with_a_fitting_doc_comment(
    neural: NeuralClassifier, resource: str, language: str, code: str
) -> None:
    # The doc classifier votes too when a doc exists: a plain, correct doc must not turn the answer.
    [vector] = neural.classify([FunctionSource(f"example.{resource}", language, code, DOCS[resource])])
    assert vector.dominant() == resource, vector


def test_batched_equals_one_by_one(neural: NeuralClassifier) -> None:
    functions = [FunctionSource(f"f{i}", lang, code) for i, (_, lang, code) in enumerate(CASES)]
    together = neural.classify(functions)
    alone = [neural.classify([f])[0] for f in functions]
    for a, b in zip(together, alone, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


def test_is_the_core_seam_and_installed_as_neural(neural: NeuralClassifier) -> None:
    assert isinstance(neural, ResourceClassifier)
    assert neural.version.startswith("neural-")
    assert NeuralClassifier().version == neural.version
    assert load_classifier("neural", cache=False).version == neural.version
    assert neural.classify([]) == []
