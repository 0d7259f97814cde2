"""The SSH gateway: one public address for the whole fleet (manage.py ssh_gateway).

`ssh <short id>@<gateway>` and `ssh -J <gateway> root@<instance name or short id>` log in with a public key
registered on the platform; the gateway then reaches the instance's sshd itself with the instance's platform key
(provisioning/platform_keys.py), never with a user's, and bridges the session (shell, command, pty, sftp).
access.py decides who may go where; server.py is the asyncssh side; services/ssh_sessions.py audits.
"""
