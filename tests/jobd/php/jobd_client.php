<?php
// A stand-in for ch1p/jobd-client 1.6 (its registry is unreachable from here), written
// from its documented wire behaviour (summed up below; the protocol: docs/jobd.md),
// strict where it is strict:
//  - IPv4 socket, request number from mt_rand(1, 999999), pre-incremented, wraps to 1;
//  - requests are json_encode([0, {type, no, data?, password?}]) + EOT; `data` cast to an
//    object; status() sends no data; the password only on the first request, if non-empty;
//  - recv() reads 1024-byte chunks until the buffer ends with EOT, and expects exactly one
//    message: anything else (a ping first, two messages in one read) is an error;
//  - a response must carry our number (or 0), its top-level data must not be a boolean,
//    and a non-empty error is thrown.
// Usage: php jobd_client.php PORT PASSWORD CALLS_JSON  (prints one JSON result per call)

class JobdException extends Exception {}

class Client {
    private $sock;
    private $no;
    private $password;
    private $first = true;

    function __construct(int $port, string $host = '127.0.0.1', string $password = '') {
        $this->sock = socket_create(AF_INET, SOCK_STREAM, SOL_TCP);
        if (!@socket_connect($this->sock, $host, $port))
            throw new JobdException('socket_connect() failed: '.socket_strerror(socket_last_error($this->sock)));
        $this->no = mt_rand(1, 999999);
        $this->password = $password;
    }

    function request(string $type, ?array $data) {
        if ($this->no >= 999999) $this->no = 1; else $this->no++;
        $req = ['type' => $type, 'no' => $this->no];
        if ($data !== null) $req['data'] = (object)$data;
        if ($this->first && $this->password !== '') $req['password'] = $this->password;
        $this->first = false;
        $this->send(json_encode([0, $req]));
        return $this->recv($this->no);
    }

    function ping() {
        $this->send(json_encode([2]));
        $msg = $this->readOne();
        if ($msg !== [3]) throw new JobdException('Malformed message: expected pong');
        return 'pong';
    }

    private function send(string $s) {
        $s .= "\x04";
        while ($s !== '') {
            $n = socket_write($this->sock, $s);
            if ($n === false) throw new JobdException('socket_write() failed');
            $s = substr($s, $n);
        }
    }

    private function readOne() {
        $buf = '';
        while (true) {
            $chunk = socket_read($this->sock, 1024);
            if ($chunk === false || $chunk === '') break;
            $buf .= $chunk;
            if (substr($buf, -1) === "\x04") break;
        }
        $parts = explode("\x04", rtrim($buf, "\x04"));
        if (count($parts) !== 1 || $parts[0] === '')
            throw new JobdException('Malformed message: expected exactly one message, got '.count($parts));
        $msg = json_decode($parts[0], true);
        if (!is_array($msg)) throw new JobdException('Malformed message: '.$parts[0]);
        return $msg;
    }

    private function recv(int $no) {
        $msg = $this->readOne();
        if ($msg[0] !== 1) throw new JobdException("Malformed response: response for $no not found.");
        $body = $msg[1];
        if ($body['no'] !== $no && $body['no'] !== 0)
            throw new JobdException("Malformed response: response for $no not found.");
        if (array_key_exists('data', $body) && is_bool($body['data']))
            throw new JobdException("Malformed RESPONSE message: data: required type is 'aifs'");
        if (!empty($body['error'])) throw new JobdException($body['error']);
        return $body['data'] ?? null;
    }
}

[$_, $port, $password, $calls] = $argv;
$c = new Client((int)$port, '127.0.0.1', $password);
foreach (json_decode($calls, true) as $call) {
    $method = array_shift($call);
    try {
        switch ($method) {
            // WorkerClient
            case 'status': $r = $c->request('status', null); break;
            case 'poll': $r = $c->request('poll', $call[0] ? ['targets' => $call[0]] : []); break;
            case 'runManual': $r = $c->request('run-manual', ['ids' => $call[0]]); break;
            case 'sendSignal': $r = $c->request('send-signal', ['jobs' => $call[0]]); break;
            case 'addTarget': $r = $c->request('add-target', ['target' => $call[0], 'concurrency' => $call[1]]); break;
            case 'removeTarget': $r = $c->request('remove-target', ['target' => $call[0]]); break;
            case 'setTargetConcurrency': $r = $c->request('set-target-concurrency', ['target' => $call[0], 'concurrency' => $call[1]]); break;
            case 'pause': $r = $c->request('pause', $call[0] ? ['targets' => $call[0]] : []); break;
            case 'continue': $r = $c->request('continue', $call[0] ? ['targets' => $call[0]] : []); break;
            // MasterClient
            case 'poke': $r = $c->request('poke', ['targets' => $call[0]]); break;
            case 'masterStatus': $r = $c->request('status', ['poll_workers' => $call[0]]); break;
            case 'masterRunManual': $r = $c->request('run-manual', ['jobs' => $call[0]]); break;
            case 'masterSendSignal': $r = $c->request('send-signal', ['jobs' => [['id' => $call[0], 'signal' => $call[1], 'target' => $call[2]]]]); break;
            case 'ping': $r = $c->ping(); break;
            default: throw new Exception("unknown call $method");
        }
        echo json_encode(['data' => $r]), "\n";
    } catch (JobdException $e) {
        echo json_encode(['exception' => $e->getMessage()]), "\n";
    }
}
