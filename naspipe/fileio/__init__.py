"""Files read and written safely: whole-or-absent writes (``atomic``), JSON from files a user can
edit, read strictly (``jsonfile``), and small files a user may have replaced by a pipe, a device or a huge file,
read only where regular and small (``smallfile``). No torch.
"""
